//! `store.url` with its password masked, the only form in which a config
//! shows it (`routerd check-config`, the admin endpoint's `GET /config`).
//!
//! The PostgreSQL driver takes a password in three places: the URL's user
//! information (`postgresql://user:pw@host/db`), its query
//! (`?password=pw`), and libpq's `key = value` form, where spaces may
//! surround `=` and a value may be quoted (`password = 'two words'`). Each
//! is masked; a string none of those readings can take apart whole while
//! it names a password is masked entirely, so a form this file does not
//! know shows nothing rather than the password.

use serde::Serializer;

use super::MASK;

/// Serializes `store.url` masked (`#[serde(serialize_with)]`).
pub(super) fn serialize<S: Serializer>(url: &str, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&masked(url))
}

/// `url` with every password in it masked.
fn masked(url: &str) -> String {
    let masked = match url.split_once("://") {
        Some((scheme, rest)) => Some(masked_uri(scheme, rest)),
        None => masked_key_values(url),
    };
    match masked {
        Some(masked) if !names_a_password(&masked) => masked,
        Some(_) | None if names_a_password(url) => MASK.to_string(),
        _ => url.to_string(),
    }
}

/// Whether `text` names a password that is not masked: the word
/// `password` anywhere but as the key of a masked value.
fn names_a_password(text: &str) -> bool {
    let masked_value = format!("={MASK}");
    text.to_ascii_lowercase()
        .match_indices("password")
        .any(|(at, word)| !text[at + word.len()..].starts_with(&masked_value))
}

/// A URI's user information and `password` query parameters masked. The
/// user information is read as the driver reads it: everything before the
/// first `@`, wherever it is (a password may hold `/` or `?`), its password
/// after the first `:`.
fn masked_uri(scheme: &str, rest: &str) -> String {
    let mut out = format!("{scheme}://");
    let after_credentials = match rest.split_once('@') {
        Some((credentials, after)) => {
            match credentials.split_once(':') {
                Some((user, _)) => out.push_str(&format!("{user}:{MASK}")),
                None => out.push_str(credentials),
            }
            out.push('@');
            after
        }
        None => rest,
    };
    let (before_query, query) = match after_credentials.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (after_credentials, None),
    };
    out.push_str(before_query);
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => {
                    format!("{key}={MASK}")
                }
                _ => pair.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

/// libpq's `key = value ...` form with `password`'s value masked; `None`
/// when it does not read as that form.
fn masked_key_values(text: &str) -> Option<String> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let key_end = rest.find(|c: char| c == '=' || c.is_whitespace())?;
        let key = &rest[..key_end];
        rest = rest[key_end..].trim_start().strip_prefix('=')?.trim_start();
        let (value, after) = split_value(rest)?;
        if key.eq_ignore_ascii_case("password") {
            out.push(format!("{key}={MASK}"));
        } else {
            out.push(format!("{key}={value}"));
        }
        rest = after.trim_start();
    }
    Some(out.join(" "))
}

/// A libpq value at the start of `text` (quoted with `'`, where `\` escapes
/// the next character, or up to the next space) and what follows it.
fn split_value(text: &str) -> Option<(&str, &str)> {
    if let Some(quoted) = text.strip_prefix('\'') {
        let mut escaped = false;
        for (index, c) in quoted.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '\'' => return Some((&text[..index + 2], &quoted[index + 1..])),
                _ => {}
            }
        }
        return None;
    }
    let end = text.find(char::is_whitespace).unwrap_or(text.len());
    Some((&text[..end], &text[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_password_is_masked() {
        for url in [
            "postgres://routerd:hunter2@db:5432/routerd",
            "postgresql://routerd@db/r?password=hunter2",
            "postgresql://routerd@db/r?sslmode=require&Password=hunter2&x=1",
            "host=db password=hunter2 user=x",
            "host=db password = hunter2 user=x",
            "host=db password='two hunter2 words' user=x",
            "host=db password='it\\'s hunter2'",
            "host=db PASSWORD=hunter2",
            // Not readable as any form: masked whole.
            "host=db password='hunter2",
            "postgres://u@h/d#password=hunter2",
            // The driver takes the user information up to the first `@`
            // anywhere: a password may hold `/` and `?`.
            "postgresql://routerd:hunter2/9k@db/routerd",
            "postgresql://routerd:Xy?hunter2@db/routerd",
            "postgresql://routerd:a/b?hunter2@db/routerd?sslmode=disable",
        ] {
            let shown = masked(url);
            assert!(!shown.contains("hunter2"), "{url} shows {shown}");
        }
    }

    #[test]
    fn what_holds_no_password_is_shown_as_it_is() {
        assert_eq!(
            masked("postgres://routerd:hunter2@db:5432/routerd"),
            format!("postgres://routerd:{MASK}@db:5432/routerd")
        );
        for url in [
            "postgres://routerd@db/routerd",
            "postgres://db/a@b",
            "postgresql://db/r?sslmode=require",
            "host=db user=x",
            "",
        ] {
            assert_eq!(masked(url), url);
        }
        assert_eq!(
            masked("host=db password = 'x y' user=x"),
            format!("host=db password={MASK} user=x")
        );
    }

    #[test]
    fn a_config_shows_its_store_url_masked() {
        let mut config = crate::config::Config::default();
        config.store.url = "host=db password = 'hunter2 x'".into();
        let json = serde_json::to_string(&config).unwrap();
        assert!(!json.contains("hunter2"), "{json}");
        config.store.backend = crate::config::StoreBackend::Postgres;
        let toml = config.to_toml();
        assert!(!toml.contains("hunter2"), "{toml}");
        assert!(toml.contains(MASK), "{toml}");
    }
}
