//! Secret config values, and the rules every secret obeys.
//!
//! A secret is a [`Secret`]: its `Debug` and its serialized form are a mask,
//! so neither a log line that prints the config nor `routerd check-config`
//! shows it. The only serialization of a config is that output; a config
//! that is read back from it carries the mask, which validation refuses.

use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize, Serializer};

/// What a secret shows instead of its value.
pub const MASK: &str = "<secret: not shown>";

/// A config value that must not leave the process: a key that signs or
/// authenticates.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// A secret holding `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the code that signs or verifies with it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The value's bytes, for the code that signs or verifies with it.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The value's bytes, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0.into_bytes()
    }

    /// Whether the value is empty (refused by validation).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Secret {
        Secret::new(value)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret::new(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(MASK)
    }
}

/// One secret of a config, with what the rules need to know about it.
pub(crate) struct SecretKey<'a> {
    /// Its config key, as a message names it: `auth.secret`.
    pub key: &'static str,
    /// The environment variable that wins over the key.
    pub env: &'static str,
    /// The value a fresh checkout uses, known to everyone.
    pub development: &'static str,
    pub value: &'a Secret,
    /// The listeners (config key and address) through which the secret
    /// guards something: the development value is refused while any of
    /// them is reachable from another machine.
    pub listeners: Vec<(&'static str, SocketAddr)>,
}

/// Why a config's secrets cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The secret is empty.
    #[error("{key} must not be empty")]
    Empty {
        /// The config key.
        key: &'static str,
    },
    /// The secret is the mask `check-config` prints, copied back.
    #[error("{key} holds the mask `check-config` prints, not a secret: set the real value")]
    Masked {
        /// The config key.
        key: &'static str,
    },
    /// The well-known development secret on a listener other machines
    /// reach.
    #[error(
        "{key} is the development secret, which everyone knows, and {listen_key} = {address} \
         is reachable from other machines: set {key} (or {env}) to a secret of your own, \
         or listen on a loopback address"
    )]
    DevelopmentSecretExposed {
        /// The config key of the secret.
        key: &'static str,
        /// The environment variable that would override it.
        env: &'static str,
        /// The config key of the exposed listener.
        listen_key: &'static str,
        /// The address it listens on.
        address: SocketAddr,
    },
    /// The admin token holds what no `Authorization` header can carry
    /// back: it could never be presented.
    #[error(
        "admin.token (or ROUTERD_ADMIN_TOKEN) must be visible ASCII, spaces and tabs inside \
         only: no control characters, non-ASCII letters, or spaces or tabs at either end; a call \
         presents it in the Authorization header, which cannot carry those (its value is \
         trimmed), so no call could ever match it"
    )]
    AdminTokenUnusable,
    /// The admin endpoint listens off loopback and no token guards its
    /// mutating calls.
    #[error(
        "admin.listen = {address} is reachable from other machines and admin.token is not set: \
         set admin.token (or ROUTERD_ADMIN_TOKEN) to a secret of your own, or listen on a \
         loopback address"
    )]
    AdminTokenMissing {
        /// The address the endpoint listens on.
        address: SocketAddr,
    },
}

/// The admin token's rules: when set, not empty, not the mask, and what an
/// `Authorization` header carries; and set whenever the endpoint listens
/// off loopback, since the token is all that stands between a reachable
/// port and a drain of the node.
pub(crate) fn check_admin_token(
    token: Option<&Secret>,
    listen: SocketAddr,
) -> Result<(), SecretError> {
    const KEY: &str = "admin.token";
    match token {
        Some(token) if token.is_empty() => Err(SecretError::Empty { key: KEY }),
        Some(token) if token.expose() == MASK => Err(SecretError::Masked { key: KEY }),
        Some(token) if !fits_a_header(token.expose()) => Err(SecretError::AdminTokenUnusable),
        Some(_) => Ok(()),
        None if listen.ip().is_loopback() => Ok(()),
        None => Err(SecretError::AdminTokenMissing { address: listen }),
    }
}

/// Whether `token` comes back whole from `Authorization: Bearer <token>`:
/// the endpoint reads a header's value only as visible ASCII (with spaces
/// and tabs), and trims the credentials, so a token with anything else, or
/// with a space or a tab at either end, never matches.
fn fits_a_header(token: &str) -> bool {
    let bytes = token.as_bytes();
    let blank = |byte: &u8| *byte == b' ' || *byte == b'\t';
    bytes
        .iter()
        .all(|byte| byte.is_ascii_graphic() || blank(byte))
        && !bytes.first().is_some_and(blank)
        && !bytes.last().is_some_and(blank)
}

/// The rules for every secret: not empty, not the mask, and not the
/// development value while any of its listeners is reachable from another
/// machine.
pub(crate) fn check(secrets: &[SecretKey<'_>]) -> Result<(), SecretError> {
    for secret in secrets {
        if secret.value.is_empty() {
            return Err(SecretError::Empty { key: secret.key });
        }
        if secret.value.expose() == MASK {
            return Err(SecretError::Masked { key: secret.key });
        }
    }
    for secret in secrets {
        if secret.value.expose() != secret.development {
            continue;
        }
        let exposed = secret
            .listeners
            .iter()
            .find(|(_, address)| !address.ip().is_loopback());
        if let Some(&(listen_key, address)) = exposed {
            return Err(SecretError::DevelopmentSecretExposed {
                key: secret.key,
                env: secret.env,
                listen_key,
                address,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_serialized_forms_are_the_mask() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), MASK);
        let shown = toml::Value::try_from(&secret).unwrap();
        assert_eq!(shown.as_str(), Some(MASK));
        let read: Secret = toml::Value::String("hunter2".to_string())
            .try_into()
            .unwrap();
        assert_eq!(read.expose(), "hunter2");
    }

    fn key<'a>(value: &'a Secret) -> SecretKey<'a> {
        SecretKey {
            key: "auth.secret",
            env: "ROUTERD_AUTH_SECRET",
            development: "dev",
            value,
            listeners: Vec::new(),
        }
    }

    /// `check` of one secret guarding `listeners`.
    fn check_on(
        value: &Secret,
        listeners: &[(&'static str, SocketAddr)],
    ) -> Result<(), SecretError> {
        let mut secret = key(value);
        secret.listeners = listeners.to_vec();
        check(&[secret])
    }

    #[test]
    fn the_development_secret_is_refused_on_a_reachable_address_only() {
        let development = Secret::new("dev");
        let own = Secret::new("own");
        let loopback: SocketAddr = "127.0.0.1:7400".parse().unwrap();
        let loopback6: SocketAddr = "[::1]:7400".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7400".parse().unwrap();
        let public: SocketAddr = "192.0.2.1:9464".parse().unwrap();
        let reachable = [("gateway.listen", loopback), ("admin.listen", public)];
        assert_eq!(
            check_on(&development, &reachable),
            Err(SecretError::DevelopmentSecretExposed {
                key: "auth.secret",
                env: "ROUTERD_AUTH_SECRET",
                listen_key: "admin.listen",
                address: public,
            })
        );
        assert!(check_on(&development, &[("gateway.listen", any)]).is_err());
        assert_eq!(check_on(&own, &reachable), Ok(()));
        assert_eq!(
            check_on(
                &development,
                &[("gateway.listen", loopback), ("admin.listen", loopback6)]
            ),
            Ok(())
        );
    }

    #[test]
    fn the_admin_token_is_required_off_loopback_and_never_empty() {
        let loopback: SocketAddr = "127.0.0.1:9464".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:9464".parse().unwrap();
        assert_eq!(check_admin_token(None, loopback), Ok(()));
        let missing = check_admin_token(None, any).unwrap_err();
        assert_eq!(missing, SecretError::AdminTokenMissing { address: any });
        assert!(missing.to_string().contains("admin.token"), "{missing}");
        let token = Secret::new("s3cret");
        assert_eq!(check_admin_token(Some(&token), any), Ok(()));
        assert_eq!(
            check_admin_token(Some(&Secret::new("")), loopback),
            Err(SecretError::Empty { key: "admin.token" })
        );
        assert_eq!(
            check_admin_token(Some(&Secret::new(MASK)), any),
            Err(SecretError::Masked { key: "admin.token" })
        );
    }

    /// A token an `Authorization` header cannot carry back whole was
    /// taken, and then no call could present it: every one was 401.
    #[test]
    fn an_admin_token_no_header_can_carry_is_refused() {
        let loopback: SocketAddr = "127.0.0.1:9464".parse().unwrap();
        for unusable in [
            " s3cret",
            "s3cret ",
            "s3cret\n",
            "\ts3cret",
            "s3cr\u{e9}t",
            "s3\u{0}cret",
            "s3\x7fcret",
        ] {
            let token = Secret::new(unusable);
            let refused = check_admin_token(Some(&token), loopback);
            assert_eq!(
                refused,
                Err(SecretError::AdminTokenUnusable),
                "{unusable:?}"
            );
            let message = refused.unwrap_err().to_string();
            assert!(message.contains("admin.token"), "{message}");
            assert!(message.contains("ROUTERD_ADMIN_TOKEN"), "{message}");
        }
        for usable in ["s3cret", "a b", "a\tb", "!~#$%&'()*+,-./:;<=>?@[]^_`{|}"] {
            let token = Secret::new(usable);
            assert_eq!(
                check_admin_token(Some(&token), loopback),
                Ok(()),
                "{usable:?}"
            );
        }
    }

    #[test]
    fn an_empty_or_masked_secret_is_refused() {
        let listeners = [("gateway.listen", "127.0.0.1:1".parse().unwrap())];
        let empty = Secret::new("");
        assert_eq!(
            check_on(&empty, &listeners),
            Err(SecretError::Empty { key: "auth.secret" })
        );
        let masked = Secret::new(MASK);
        assert_eq!(
            check_on(&masked, &listeners),
            Err(SecretError::Masked { key: "auth.secret" })
        );
    }
}
