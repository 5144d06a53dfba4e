//! Secrets kept out of everything shown: a Redis URL with its passwords
//! replaced by `***` (`simdedup config`, errors, log lines at every level),
//! and any text scrubbed of the secrets a URL holds.

/// A Redis URL setting with every secret replaced by `***`, for anything shown:
/// `simdedup config`, errors, log lines at every level.
///
/// Covers every form [`crate::connect`] reads: each comma-separated cluster
/// seed (`redis://user:secret@a,redis://user:secret@b` → both hidden), a
/// Sentinel URL's user information (`redis+sentinel://app:secret@h1,h2/m`) and
/// its query parameters (`?sentinel_password=secret`: any parameter whose name
/// holds `password`). The user information is everything up to the last `@`
/// before the query, so a password holding `/`, `@` or `,` is hidden whole. A
/// lone user information (`redis://secret@host`) is hidden too: redis-rs reads
/// it as a user name, but people put passwords there. URLs without a secret
/// are returned unchanged.
pub fn redact_url(url: &str) -> String {
    let sentinel = ["redis+sentinel://", "rediss+sentinel://"]
        .iter()
        .any(|p| url.trim_start().starts_with(p));
    if sentinel {
        return redact_one(url);
    }
    // Seeds of one cluster: each is a URL of its own.
    url.split(',').map(redact_one).collect::<Vec<_>>().join(",")
}

/// [`redact_url`] of one URL (a single node's, a cluster seed's, or a whole
/// Sentinel URL).
fn redact_one(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        // Not a URL: if it holds an `@`, what comes before may be a secret.
        return match url.rfind('@') {
            Some(at) => format!("***{}", &url[at..]),
            None => url.to_owned(),
        };
    };
    let rest = &url[scheme_end + 3..];
    let (before_query, query) = match rest.find('?') {
        Some(q) => (&rest[..q], Some(&rest[q + 1..])),
        None => (rest, None),
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..scheme_end + 3]);
    match before_query.rfind('@') {
        Some(at) => {
            let userinfo = &before_query[..at];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..colon]);
                    out.push_str(":***");
                }
                None => out.push_str("***"),
            }
            out.push_str(&before_query[at..]);
        }
        None => out.push_str(before_query),
    }
    if let Some(query) = query {
        out.push('?');
        let pairs = query.split('&').map(|pair| match pair.split_once('=') {
            Some((k, _)) if k.to_ascii_lowercase().contains("password") => format!("{k}=***"),
            _ => pair.to_owned(),
        });
        out.push_str(&pairs.collect::<Vec<_>>().join("&"));
    }
    out
}

/// The secrets a URL setting holds (the passwords [`redact_url`] hides, as
/// written and percent-decoded), longest first: what must never appear in any
/// text shown, whatever produced that text.
pub fn url_secrets(url: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    let mut add = |s: &str| {
        if !s.is_empty() {
            secrets.push(s.to_owned());
            let decoded = percent_decode(s);
            if decoded != s {
                secrets.push(decoded);
            }
        }
    };
    let sentinel = ["redis+sentinel://", "rediss+sentinel://"]
        .iter()
        .any(|p| url.trim_start().starts_with(p));
    let pieces: Vec<&str> = if sentinel {
        vec![url]
    } else {
        url.split(',').collect()
    };
    for piece in pieces {
        let rest = piece.find("://").map_or(piece, |e| &piece[e + 3..]);
        let (before_query, query) = match rest.find('?') {
            Some(q) => (&rest[..q], &rest[q + 1..]),
            None => (rest, ""),
        };
        if let Some(at) = before_query.rfind('@') {
            let userinfo = &before_query[..at];
            add(userinfo.split_once(':').map_or(userinfo, |(_, p)| p));
        }
        for pair in query.split('&') {
            if let Some((k, v)) = pair.split_once('=') {
                if k.to_ascii_lowercase().contains("password") {
                    add(v);
                }
            }
        }
    }
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets
}

/// `text` with every secret of the URL setting `url` replaced by `***`: for
/// messages built from parts of the URL or by a library that saw it.
pub fn scrub(text: &str, url: &str) -> String {
    let mut out = text.to_owned();
    for secret in url_secrets(url) {
        out = out.replace(&secret, "***");
    }
    out
}

/// `%XX` escapes decoded (invalid ones kept as they are).
pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(
            redact_url("redis://app:s3cr@t@db:6379/0"),
            "redis://app:***@db:6379/0"
        );
        assert_eq!(redact_url("rediss://:pw@h:1"), "rediss://:***@h:1");
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
    }

    /// Every URL form `docs/operations.md` lists, with secrets: none is shown
    /// by `redact_url`, and `scrub` removes each from any text.
    pub(crate) const SECRET_URLS: &[(&str, &[&str])] = &[
        ("redis://app:pw1@db:6379/0", &["pw1"]),
        ("rediss://app:pw2@db:6380/", &["pw2"]),
        ("redis://:pw3@db:6379", &["pw3"]),
        ("redis://pw4@db:6379", &["pw4"]),
        ("redis://app:p%2Fw5@db:6379", &["p%2Fw5", "p/w5"]),
        ("redis://app:s3cr@t6@db:6379/0", &["s3cr@t6"]),
        (
            "redis://app:pw7@a:7000,redis://app:pw8@b:7000,redis://app:pw9@c:7000",
            &["pw7", "pw8", "pw9"],
        ),
        (
            "redis+sentinel://app:pw10@s1:26379,s2:26379/mymaster/0?sentinel_username=sen&sentinel_password=pw11",
            &["pw10", "pw11"],
        ),
        (
            "rediss+sentinel://app:pw12@s1:26379/mymaster?sentinel_password=pw13",
            &["pw13", "pw12"],
        ),
        ("redis+sentinel://app:pw14@:26379/m", &["pw14"]),
        ("redis+sentinel://app:p/w15@s1:26379/m", &["p/w15"]),
    ];

    #[test]
    fn no_url_form_shows_its_password() {
        for (url, secrets) in SECRET_URLS {
            let shown = redact_url(url);
            for secret in *secrets {
                assert!(!shown.contains(secret), "{url} shown as {shown}");
            }
            assert!(shown.contains("***"), "{url} shown as {shown}");
            let text = format!("error at {url}: {}", secrets.join(" "));
            let scrubbed = scrub(&text, url);
            for secret in *secrets {
                assert!(!scrubbed.contains(secret), "{text} scrubbed to {scrubbed}");
            }
        }
        assert_eq!(
            redact_url("redis://a:pw@h1:7000,redis://b:pw@h2:7000"),
            "redis://a:***@h1:7000,redis://b:***@h2:7000"
        );
        assert_eq!(
            redact_url("redis+sentinel://u:pw@s1,s2/m?sentinel_username=x&sentinel_password=y"),
            "redis+sentinel://u:***@s1,s2/m?sentinel_username=x&sentinel_password=***"
        );
    }
}
