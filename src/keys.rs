//! Redis key names. Every key of namespace `NS` starts with `simdedup:{NS}:`: the
//! braces are a Redis Cluster hash tag, so all of a namespace's keys live on one
//! node and one Lua script may touch any of them. Documented in `docs/redis-keys.md`.

/// The key builder for one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys for namespace `ns`. Namespaces are validated by [`validate_namespace`].
    pub fn new(ns: &str) -> Keys {
        Keys {
            prefix: format!("simdedup:{{{ns}}}:"),
        }
    }

    /// `simdedup:{NS}:`, the prefix of every key of the namespace.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Input stream producers `XADD` articles to.
    pub fn input_stream(&self) -> String {
        format!("{}in", self.prefix)
    }

    /// Output stream: exactly one verdict entry per input entry.
    pub fn output_stream(&self) -> String {
        format!("{}out", self.prefix)
    }

    /// Dead-letter stream: entries that could not be processed, with the reason.
    pub fn dead_stream(&self) -> String {
        format!("{}dead", self.prefix)
    }
}

/// A namespace is 1–64 characters of `[A-Za-z0-9_.-]` (readable in `redis-cli`,
/// and free of the `{}` that would break the hash tag).
pub fn validate_namespace(ns: &str) -> Result<(), String> {
    let ok = !ns.is_empty()
        && ns.len() <= 64
        && ns
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "namespace {ns:?} is invalid: use 1-64 characters of letters, digits, `_`, `.` or `-`"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_hash_tag() {
        let k = Keys::new("news");
        assert_eq!(k.input_stream(), "simdedup:{news}:in");
        assert_eq!(k.output_stream(), "simdedup:{news}:out");
        assert_eq!(k.dead_stream(), "simdedup:{news}:dead");
    }

    #[test]
    fn namespace_rules() {
        assert!(validate_namespace("default").is_ok());
        assert!(validate_namespace("a.b-c_1").is_ok());
        assert!(validate_namespace("").is_err());
        assert!(validate_namespace("x{y}").is_err());
        assert!(validate_namespace(&"a".repeat(65)).is_err());
    }
}
