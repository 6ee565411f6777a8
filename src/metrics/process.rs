//! The process metrics every Prometheus exporter has (`process_*`), read
//! from /proc at scrape time: resident and virtual memory, open file
//! descriptors and their limit, CPU seconds and the start time.
//!
//! Reading them allocates nothing (a scrape renders into one buffer): the
//! files are read into stack buffers, and the descriptors are counted with
//! `getdents64` into one, not with `read_dir` (which allocates a path per
//! entry). A file that cannot be read leaves its metric out of the scrape
//! rather than exporting a made-up zero.

use std::fmt::Write as _;
use std::io::Read as _;
use std::sync::OnceLock;

/// The longest /proc/self/stat routerd reads; a line is about 300 bytes
/// (the command name is at most 16).
const STAT_BYTES_MAX: usize = 1024;
/// /proc/uptime is two numbers.
const UPTIME_BYTES_MAX: usize = 64;
/// The directory buffer of one `getdents64` call; a node with thousands of
/// sockets takes a few calls.
const DIRENT_BYTES: usize = 4096;

/// What /proc/self/stat says of the process.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Stat {
    /// User plus system CPU time, in clock ticks.
    cpu_ticks: u64,
    /// Since the machine booted, in clock ticks.
    start_ticks: u64,
    virtual_bytes: u64,
    resident_pages: u64,
}

/// Parses a /proc/<pid>/stat line. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses itself, so fields are
/// counted from the last `)`.
fn parse_stat(line: &str) -> Option<Stat> {
    let after = &line[line.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name.
    let mut fields = after.split_ascii_whitespace();
    let mut field = |n: usize| -> Option<u64> {
        // `nth` consumes: each call is relative to the last.
        fields.nth(n)?.parse().ok()
    };
    let utime = field(14 - 3)?;
    let stime = field(0)?;
    let start_ticks = field(22 - 15 - 1)?;
    let virtual_bytes = field(0)?;
    let resident_pages = field(0)?;
    Some(Stat {
        cpu_ticks: utime + stime,
        start_ticks,
        virtual_bytes,
        resident_pages,
    })
}

/// Reads `path` into `buffer`; the text read, if it is UTF-8 and fits.
fn read_small<'b>(path: &str, buffer: &'b mut [u8]) -> Option<&'b str> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut filled = 0;
    loop {
        let read = file.read(&mut buffer[filled..]).ok()?;
        if read == 0 {
            break;
        }
        filled += read;
        if filled == buffer.len() {
            return None;
        }
    }
    std::str::from_utf8(&buffer[..filled]).ok()
}

fn sysconf(name: libc::c_int) -> Option<u64> {
    // SAFETY: sysconf reads a configuration value; it takes no pointer.
    let value = unsafe { libc::sysconf(name) };
    u64::try_from(value).ok().filter(|&value| value > 0)
}

/// The soft open-file limit (`ulimit -n`): the descriptors the process
/// may have open.
fn max_fds() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    Some(limit.rlim_cur)
}

/// The descriptors this process has open, less the one counting them.
fn open_fds() -> Option<u64> {
    // SAFETY: the path is a NUL-terminated literal; the flags ask for a
    // read-only directory descriptor, closed below.
    let dir = unsafe {
        libc::open(
            c"/proc/self/fd".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return None;
    }
    let mut buffer = [0u8; DIRENT_BYTES];
    let mut entries = 0u64;
    let counted = loop {
        // SAFETY: `buffer` is writable for its whole length, which is the
        // length passed; `dir` is the directory opened above.
        let read =
            unsafe { libc::syscall(libc::SYS_getdents64, dir, buffer.as_mut_ptr(), buffer.len()) };
        let Ok(read) = usize::try_from(read) else {
            break None;
        };
        if read == 0 {
            break Some(entries);
        }
        entries += count_dirents(&buffer[..read.min(buffer.len())]);
    };
    // SAFETY: `dir` is open and closed once, here.
    unsafe { libc::close(dir) };
    // `.`, `..` and the directory's own descriptor are not the process's.
    counted.map(|entries| entries.saturating_sub(3))
}

/// The entries of a `getdents64` answer: records of `d_ino` (8 bytes),
/// `d_off` (8), `d_reclen` (2, native endian), `d_type` (1), the name.
fn count_dirents(mut records: &[u8]) -> u64 {
    let mut count = 0;
    while records.len() >= 19 {
        let reclen = usize::from(u16::from_ne_bytes([records[16], records[17]]));
        if reclen == 0 || reclen > records.len() {
            break;
        }
        count += 1;
        records = &records[reclen..];
    }
    count
}

/// The process's start, in seconds since the Unix epoch: the boot time
/// (now less the uptime) plus the start's ticks since boot. Computed once,
/// so it stays the same from scrape to scrape (a reading of now and the
/// uptime would jitter it by their gap).
fn start_time_seconds(start_ticks: u64, ticks_per_second: u64) -> Option<f64> {
    static START: OnceLock<Option<f64>> = OnceLock::new();
    *START.get_or_init(|| {
        let mut buffer = [0u8; UPTIME_BYTES_MAX];
        let uptime: f64 = read_small("/proc/uptime", &mut buffer)?
            .split_ascii_whitespace()
            .next()?
            .parse()
            .ok()?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_secs_f64();
        let boot = now - uptime;
        Some((boot + start_ticks as f64 / ticks_per_second as f64).round())
    })
}

fn write_one(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    // Writing into a String cannot fail.
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}

/// Writes the process families it can read.
pub(super) fn write_process(out: &mut String) {
    let mut buffer = [0u8; STAT_BYTES_MAX];
    let stat = read_small("/proc/self/stat", &mut buffer).and_then(parse_stat);
    let ticks = sysconf(libc::_SC_CLK_TCK);
    let page = sysconf(libc::_SC_PAGESIZE);
    if let (Some(stat), Some(ticks)) = (stat, ticks) {
        let seconds = stat.cpu_ticks as f64 / ticks as f64;
        write_one(
            out,
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent, in seconds.",
            seconds,
        );
        if let Some(start) = start_time_seconds(stat.start_ticks, ticks) {
            write_one(
                out,
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since the Unix epoch, in seconds.",
                start,
            );
        }
    }
    if let Some(stat) = stat {
        write_one(
            out,
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size, in bytes.",
            stat.virtual_bytes,
        );
        if let Some(page) = page {
            write_one(
                out,
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory size, in bytes.",
                stat.resident_pages * page,
            );
        }
    }
    if let Some(fds) = open_fds() {
        write_one(
            out,
            "process_open_fds",
            "gauge",
            "Open file descriptors.",
            fds,
        );
    }
    if let Some(max) = max_fds() {
        write_one(
            out,
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            max,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_from_after_the_name() {
        // A name with a space and a parenthesis, as a thread may be named.
        let line = "4242 (routerd (x) y) S 1 4242 4242 0 -1 4194560 2317 0 0 0 \
                    150 25 0 0 20 0 9 0 123456 987654321 5000 18446744073709551615 \
                    1 1 0 0 0 0 0 4096 0 0 0 17 1 0 0 0 0 0";
        let stat = parse_stat(line).unwrap();
        assert_eq!(
            stat,
            Stat {
                cpu_ticks: 175,
                start_ticks: 123456,
                virtual_bytes: 987654321,
                resident_pages: 5000,
            }
        );
        assert_eq!(parse_stat("4242 (short) S 1 2"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn this_process_has_its_metrics() {
        let mut out = String::new();
        write_process(&mut out);
        let value = |name: &str| -> f64 {
            let line = out
                .lines()
                .find(|line| line.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing:\n{out}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        // stdin, stdout and stderr at least.
        assert!(value("process_open_fds") >= 3.0, "{out}");
        assert!(
            value("process_max_fds") >= value("process_open_fds"),
            "{out}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = value("process_start_time_seconds");
        assert!(start <= now + 1.0 && start > now - 3600.0, "{start} {now}");
        assert!(value("process_cpu_seconds_total") >= 0.0);
    }
}
