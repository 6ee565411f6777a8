//! Command lines from the terminal or a pipe, each bounded by
//! [`LINE_MAX`](super::command::LINE_MAX) bytes however long the input line
//! is: a longer line is skipped whole and reported, never buffered.

use std::io::{self, BufRead};

/// One line of input, without its terminator (`\n` or `\r\n`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    Text(String),
    /// Longer than the limit; its bytes were discarded up to the newline.
    TooLong,
    /// Not UTF-8; discarded.
    NotUtf8,
}

/// Reads the next line, `Ok(None)` at end of input. A last line without a
/// newline still counts. At most `max + 1` bytes are ever held.
pub fn read_line(reader: &mut impl BufRead, max: usize) -> io::Result<Option<Line>> {
    let mut line = Vec::new();
    let mut too_long = false;
    let mut seen_any = false;
    loop {
        let chunk = match reader.fill_buf() {
            Ok(chunk) => chunk,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if chunk.is_empty() {
            if !seen_any {
                return Ok(None);
            }
            break;
        }
        seen_any = true;
        let newline = chunk.iter().position(|&byte| byte == b'\n');
        let content = &chunk[..newline.unwrap_or(chunk.len())];
        if !too_long {
            let room = (max + 1).saturating_sub(line.len());
            line.extend_from_slice(&content[..content.len().min(room)]);
            if line.len() > max {
                too_long = true;
                line = Vec::new();
            }
        }
        let consumed = content.len() + usize::from(newline.is_some());
        reader.consume(consumed);
        if newline.is_some() {
            break;
        }
    }
    if too_long {
        return Ok(Some(Line::TooLong));
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Some(match String::from_utf8(line) {
        Ok(text) => Line::Text(text),
        Err(_) => Line::NotUtf8,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;

    fn lines(input: &[u8], max: usize, capacity: usize) -> Vec<Line> {
        let mut reader = BufReader::with_capacity(capacity, input);
        let mut out = Vec::new();
        while let Some(line) = read_line(&mut reader, max).expect("in-memory read") {
            out.push(line);
        }
        out
    }

    fn text(s: &str) -> Line {
        Line::Text(s.to_string())
    }

    #[test]
    fn splits_lines_across_small_buffers() {
        for capacity in [1, 2, 3, 64] {
            assert_eq!(
                lines(b"incr 5\r\nget\n\nlast", 16, capacity),
                vec![text("incr 5"), text("get"), text(""), text("last")],
                "capacity {capacity}"
            );
        }
        assert_eq!(lines(b"", 16, 8), vec![]);
        assert_eq!(lines(b"\n", 16, 8), vec![text("")]);
    }

    #[test]
    fn a_long_line_is_skipped_whole_and_the_next_one_read() {
        let mut input = vec![b'x'; 10_000];
        input.extend_from_slice(b"\nget\n");
        for capacity in [3, 4096] {
            assert_eq!(
                lines(&input, 16, capacity),
                vec![Line::TooLong, text("get")]
            );
        }
        // Exactly at the limit is fine; one more byte is not.
        assert_eq!(
            lines(b"0123456789abcdef\n", 16, 5),
            vec![text("0123456789abcdef")]
        );
        assert_eq!(lines(b"0123456789abcdefg\n", 16, 5), vec![Line::TooLong]);
    }

    #[test]
    fn invalid_utf8_is_reported() {
        assert_eq!(
            lines(b"say 1 \xff\nget\n", 16, 4),
            vec![Line::NotUtf8, text("get")]
        );
    }
}
