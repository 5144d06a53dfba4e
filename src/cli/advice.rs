//! What to do about an error, said where it is shown. The library's errors
//! say what went wrong and keep their sources; what to do about one is said
//! here, from those sources, when a command prints the error or a worker
//! logs it.

use std::error::Error;

use redis::RedisError;

use crate::transient::{is_refused_by_acl, ACL_ADVICE};

/// What to do when a Redis server's TLS certificate is refused.
pub const UNTRUSTED_CERTIFICATE: &str = "the server's TLS certificate is not trusted: set \
     SSL_CERT_FILE to a PEM file with the CA that signed it";

/// `text`, the message of `error`, followed by what to do about `error` when
/// one of its causes is a Redis error with something specific to say, and
/// `text` does not say it already: a command the user's ACL refuses (`: …`,
/// where the ACL of each role is), a server certificate refused (` (hint:
/// …)`, how to trust its CA).
pub fn with_advice(text: String, error: &(dyn Error + 'static)) -> String {
    let redis_errors = || {
        std::iter::successors(Some(error), |&e| e.source())
            .filter_map(|e| e.downcast_ref::<RedisError>())
    };
    if redis_errors().any(is_refused_by_acl) && !text.contains(ACL_ADVICE) {
        format!("{text}: {ACL_ADVICE}")
    } else if redis_errors().any(is_untrusted_certificate) && !text.contains(UNTRUSTED_CERTIFICATE)
    {
        format!("{text} (hint: {UNTRUSTED_CERTIFICATE})")
    } else {
        text
    }
}

/// Whether `e` is a TLS handshake that refused the server's certificate.
fn is_untrusted_certificate(e: &RedisError) -> bool {
    let e = e.to_string().to_ascii_lowercase();
    e.contains("certificate") || e.contains("unknownissuer")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::IndexError;

    fn io(message: &str) -> RedisError {
        RedisError::from(std::io::Error::other(message.to_owned()))
    }

    #[test]
    fn advice_follows_the_redis_error_among_the_causes() {
        let refused = IndexError::Unavailable {
            reason: "cannot reach Redis".into(),
            source: Some(io("invalid peer certificate: UnknownIssuer")),
        };
        assert_eq!(
            with_advice("refused".into(), &refused),
            format!("refused (hint: {UNTRUSTED_CERTIFICATE})")
        );
        let noperm =
            redis::parse_redis_value(b"-NOPERM no permissions to run the 'xadd' command\r\n")
                .and_then(|v| v.extract_error())
                .expect_err("an error reply");
        let refused = IndexError::Refused(noperm);
        assert_eq!(
            with_advice("refused".into(), &refused),
            format!("refused: {ACL_ADVICE}")
        );
        // Said once, and only of a Redis error.
        let said = format!("refused: {ACL_ADVICE}");
        assert_eq!(with_advice(said.clone(), &refused), said);
        let text = "a URL ending in #insecure (TLS without checking the server's certificate)";
        let config = IndexError::Config(text.into());
        assert_eq!(with_advice(text.into(), &config), text);
        let down = IndexError::Unavailable {
            reason: "cannot reach Redis".into(),
            source: Some(io("Connection refused")),
        };
        assert_eq!(with_advice("down".into(), &down), "down");
    }
}
