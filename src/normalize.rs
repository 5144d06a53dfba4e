//! Text normalization: the first step of the fingerprint (see `docs/fingerprint.md`).
//!
//! Republished articles differ from their source in ways that carry no meaning:
//! HTML wrappers and comments, entities, full-width punctuation, markdown emphasis,
//! blank lines. Normalization removes all of it so that the later steps only see
//! the words. It is pure and allocation-light; every rule here is part of the
//! fingerprint spec, so changing one is a fingerprint version bump.

use std::borrow::Cow;

use unicode_normalization::UnicodeNormalization;

/// Elements whose content is never article text.
const SKIPPED_ELEMENTS: [&str; 4] = ["script", "style", "noscript", "template"];

/// Elements that end a line of text (so sentences on either side stay apart).
const BLOCK_ELEMENTS: [&str; 20] = [
    "p",
    "br",
    "div",
    "li",
    "ul",
    "ol",
    "tr",
    "td",
    "th",
    "table",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "blockquote",
    "section",
    "article",
    "hr",
];

/// Normalize an article body: strip markup, decode entities, NFKC, drop markdown
/// emphasis, fold whitespace. Lines are kept (joined by `\n`) because line breaks
/// end sentences; blank lines are removed.
pub fn normalize(text: &str) -> String {
    let without_tags = strip_html(text);
    // Entities start with `&`; most articles have none, and the decoder walks the
    // text character by character even then.
    let decoded = if memchr_byte(b'&', without_tags.as_bytes()) {
        html_escape::decode_html_entities(&without_tags)
    } else {
        Cow::Borrowed(&*without_tags)
    };
    // Entities may have produced markup-like text ("&lt;b&gt;"); it is text now and stays.
    let nfkc = nfkc(&decoded);
    let mut out = String::with_capacity(nfkc.len());
    let mut markdown = String::new();
    // Exactly `str::lines`: split after `\n`, then drop it and a `\r` before it.
    for line in lines_inclusive(&nfkc) {
        let line = match line.strip_suffix('\n') {
            Some(line) => line.strip_suffix('\r').unwrap_or(line),
            None => line,
        };
        let body = strip_markdown_prefix(line);
        let mark = out.len();
        if !out.is_empty() {
            out.push('\n');
        }
        // Most lines have no markdown marker: fold them straight into `out`. A
        // line with one has its markers stripped first, then is folded.
        let folded = match fold_whitespace_into(body, &mut out, true) {
            Folded::Marker => {
                out.truncate(mark);
                if !out.is_empty() {
                    out.push('\n');
                }
                let body = strip_markdown_markers(body, &mut markdown);
                fold_whitespace_into(body, &mut out, false) == Folded::Some
            }
            folded => folded == Folded::Some,
        };
        // A line that folds to nothing is dropped, with its separator.
        if !folded {
            out.truncate(mark);
        }
    }
    out
}

/// Does `haystack` contain `needle`?
#[inline]
fn memchr_byte(needle: u8, haystack: &[u8]) -> bool {
    memchr::memchr(needle, haystack).is_some()
}

/// `text.split_inclusive('\n')`.
fn lines_inclusive(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = memchr::memchr(b'\n', rest.as_bytes()).map_or(rest.len(), |i| i + 1);
        let (line, tail) = rest.split_at(end);
        rest = tail;
        Some(line)
    })
}

/// Unicode NFKC, fast for CJK text.
///
/// Full-width ASCII forms (U+FF01–FF5E) and the ideographic space (U+3000) are
/// nearly all the compatibility characters Chinese text has. NFKC maps each to one
/// ASCII character, and replacing a character by its compatibility decomposition
/// before normalizing does not change the result, so they are mapped directly; the
/// general algorithm then runs only around the characters that need it.
fn nfkc(text: &str) -> Cow<'_, str> {
    /// NFKC's compatibility mapping for the full-width forms and the ideographic space.
    fn full_width(c: char) -> Option<char> {
        match c {
            '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0),
            '\u{3000}' => Some(' '),
            _ => None,
        }
    }
    /// Characters NFKC leaves alone whatever surrounds them (quick-check Yes,
    /// combining class 0): ASCII, the CJK ideographs and common CJK punctuation.
    /// Checking these by range is much cheaper than the general table lookup.
    fn stable(c: char) -> bool {
        c.is_ascii()
            || matches!(c, '\u{4E00}'..='\u{9FFF}' | '\u{3001}'..='\u{3002}' | '\u{3008}'..='\u{3011}'
                | '\u{2018}'..='\u{2019}' | '\u{201C}'..='\u{201D}' | '\u{2014}' | '\u{00B7}' | '\u{2022}')
    }
    let mut mapped: Option<String> = None;
    let mut last = 0;
    let mut all_stable = true;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        // Fast paths without decoding: ASCII, and U+4E00–U+9FFF (lead byte E5–E9,
        // or E4 followed by B8–BF): stable, never full-width.
        if b < 0x80 {
            i += 1;
            continue;
        }
        if (0xE5..=0xE9).contains(&b) || (b == 0xE4 && bytes[i + 1] >= 0xB8) {
            i += 3;
            continue;
        }
        let c = text[i..].chars().next().unwrap_or_default();
        let next = i + c.len_utf8();
        if let Some(ascii) = full_width(c) {
            let out = mapped.get_or_insert_with(|| String::with_capacity(text.len()));
            out.push_str(&text[last..i]);
            out.push(ascii);
            last = next;
        } else if !stable(c) {
            all_stable = false;
        }
        i = next;
    }
    let mapped: Cow<'_, str> = match mapped {
        Some(mut out) => {
            out.push_str(&text[last..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(text),
    };
    if all_stable {
        return mapped;
    }
    Cow::Owned(nfkc_around_unstable(&mapped, stable))
}

/// NFKC of `text`, running the general algorithm only where it can change
/// something. A `stable` character (NFKC quick check Yes, combining class 0) is a
/// normalization boundary: nothing before it reorders or composes with it or
/// anything after it, so the text may be cut before each one and the pieces
/// normalized alone. Only the pieces with an unstable character (the stable one
/// they start with, then the unstable ones) need the general algorithm; the rest
/// is copied.
fn nfkc_around_unstable(text: &str, stable: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut copied = 0;
    // Where the current piece starts: at the last stable character.
    let mut piece = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if stable(c) {
            piece = i;
            continue;
        }
        // The piece runs to the next stable character.
        let mut end = text.len();
        while let Some(&(j, d)) = chars.peek() {
            if stable(d) {
                end = j;
                break;
            }
            chars.next();
        }
        out.push_str(&text[copied..piece]);
        out.extend(text[piece..end].nfkc());
        copied = end;
        piece = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// Remove HTML comments, tags and the content of script-like elements.
///
/// A `<` only opens a tag when followed by a letter, `/`, `!` or `?`, so text such as
/// "a < b" or "<3" survives. Block-level tags become a line break.
fn strip_html(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    if !memchr_byte(b'<', bytes) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut last = 0;
    let mut next_gt = NextByte::new(b'>');
    while let Some(off) = memchr::memchr(b'<', &bytes[i..]) {
        let start = i + off;
        let next = bytes.get(start + 1).copied();
        let opens_tag = matches!(next, Some(c) if c.is_ascii_alphabetic() || c == b'/' || c == b'!' || c == b'?');
        if !opens_tag {
            i = start + 1;
            continue;
        }
        out.push_str(&text[last..start]);
        if text[start..].starts_with("<!--") {
            // A comment runs to `-->`; an unterminated one swallows the rest.
            let end = text[start + 4..]
                .find("-->")
                .map_or(text.len(), |e| start + 4 + e + 3);
            i = end;
            last = end;
            continue;
        }
        let Some(close) = next_gt.find(bytes, start) else {
            // "<abc" with no `>`: not a tag, keep it as text.
            i = start + 1;
            last = start;
            continue;
        };
        let end = close + 1;
        let name = tag_name(&text[start + 1..end - 1]);
        if !name.closing
            && SKIPPED_ELEMENTS
                .iter()
                .any(|s| name.name.eq_ignore_ascii_case(s))
        {
            let closing = format!("</{}", name.name.to_ascii_lowercase());
            let rest = &text[end..];
            let skip_to = find_ascii_case_insensitive(rest, &closing)
                .and_then(|p| rest[p..].find('>').map(|q| end + p + q + 1))
                .unwrap_or(text.len());
            i = skip_to;
            last = skip_to;
            continue;
        }
        if BLOCK_ELEMENTS
            .iter()
            .any(|b| name.name.eq_ignore_ascii_case(b))
        {
            out.push('\n');
        }
        i = end;
        last = end;
    }
    out.push_str(&text[last..]);
    Cow::Owned(out)
}

/// The first position of one byte at or after a position, for scans whose
/// position only moves forward.
///
/// Invariant: after a search, `found` is the first `byte` at or after every
/// position queried so far up to it (or `None`: there is none after the last
/// query). A later query reuses it while it is not behind the query, so all
/// queries together read the text once, where a fresh search per query reads the
/// rest of it each time (quadratic on text such as `[[[[…` or `<a<a<a…`).
struct NextByte {
    byte: u8,
    searched: bool,
    found: Option<usize>,
}

impl NextByte {
    fn new(byte: u8) -> Self {
        NextByte {
            byte,
            searched: false,
            found: None,
        }
    }

    /// The first `byte` in `bytes` at or after `at`. Queries on one `bytes`
    /// must come with non-decreasing `at`.
    fn find(&mut self, bytes: &[u8], at: usize) -> Option<usize> {
        if !self.searched || self.found.is_some_and(|f| f < at) {
            self.found = memchr::memchr(self.byte, &bytes[at.min(bytes.len())..]).map(|p| at + p);
            self.searched = true;
        }
        self.found
    }
}

struct TagName<'a> {
    name: &'a str,
    closing: bool,
}

fn tag_name(inner: &str) -> TagName<'_> {
    let closing = inner.starts_with('/');
    let inner = inner.trim_start_matches(['/', '!', '?']);
    let end = inner
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == ':'))
        .unwrap_or(inner.len());
    TagName {
        name: &inner[..end],
        closing,
    }
}

fn find_ascii_case_insensitive(haystack: &str, needle: &str) -> Option<usize> {
    let h = haystack.as_bytes();
    let n = needle.as_bytes();
    if n.len() > h.len() {
        return None;
    }
    (0..=h.len() - n.len()).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// Drop markdown that decorates rather than says: emphasis markers (`*`, `_`, `~~`,
/// backticks), heading and quote prefixes, list bullets, and link targets
/// (`[text](url)` keeps `text`). (The normalizer itself calls the two halves,
/// [`strip_markdown_prefix`] and, only for lines with a marker,
/// [`strip_markdown_markers`].)
#[cfg(test)]
fn strip_markdown_line<'a>(line: &'a str, buf: &'a mut String) -> &'a str {
    let body = strip_markdown_prefix(line);
    if !body.as_bytes().iter().any(|&b| class(b) == MARKER) {
        return body;
    }
    strip_markdown_markers(body, buf)
}

/// Heading and quote prefixes and list bullets.
fn strip_markdown_prefix(line: &str) -> &str {
    let trimmed = line.trim_start();
    let body = trimmed
        .trim_start_matches('#')
        .trim_start_matches('>')
        .trim_start();
    match body.strip_prefix("- ").or_else(|| body.strip_prefix("+ ")) {
        Some(rest) => rest,
        None => body,
    }
}

/// Emphasis markers and link targets, into `buf`.
fn strip_markdown_markers<'a>(body: &'a str, buf: &'a mut String) -> &'a str {
    let is_marker = |b: &u8| class(*b) == MARKER;
    let bytes = body.as_bytes();
    let out = buf;
    out.clear();
    let mut i = 0;
    // `i` and the positions searched from only move forward.
    let mut next_bracket = NextByte::new(b']');
    let mut next_paren = NextByte::new(b')');
    // Markdown markers are ASCII, so walk bytes and copy everything else through.
    while i < bytes.len() {
        match bytes[i] {
            b'*' | b'`' => i += 1,
            b'~' if bytes.get(i + 1) == Some(&b'~') => i += 2,
            // `_` is emphasis only at a word edge; inside snake_case it is text.
            b'_' => {
                let prev_word = body[..i]
                    .chars()
                    .next_back()
                    .is_some_and(char::is_alphanumeric);
                let next_word = body[i + 1..]
                    .chars()
                    .next()
                    .is_some_and(char::is_alphanumeric);
                if prev_word && next_word {
                    out.push('_');
                }
                i += 1;
            }
            b'[' => {
                // [text](url) -> text
                let link = next_bracket.find(bytes, i + 1).and_then(|close| {
                    if bytes.get(close + 1) != Some(&b'(') {
                        return None;
                    }
                    let paren = next_paren.find(bytes, close + 2)?;
                    Some((close, paren + 1))
                });
                match link {
                    Some((close, end)) => {
                        out.push_str(&body[i + 1..close]);
                        i = end;
                    }
                    None => {
                        out.push('[');
                        i += 1;
                    }
                }
            }
            _ => {
                // Copy up to the next marker (after at least this whole character).
                let after = i + body[i..].chars().next().map_or(1, char::len_utf8);
                let next = bytes[after..]
                    .iter()
                    .position(is_marker)
                    .map_or(body.len(), |n| after + n);
                out.push_str(&body[i..next]);
                i = next;
            }
        }
    }
    out.as_str()
}

/// Byte classes for the line scans: most bytes are [`PLAIN`].
const PLAIN: u8 = 0;
/// ASCII whitespace (`char::is_whitespace`: `\t \n \x0B \x0C \r` and space).
const SPACE: u8 = 1;
/// The lead byte of a character that may be non-ASCII whitespace.
const MAYBE_SPACE: u8 = 2;
/// A markdown marker: `*`, `_`, `` ` ``, `~`, `[`.
const MARKER: u8 = 3;
/// The lead byte (E4–E9) of a three-byte character U+4000–U+9FFF (nearly all
/// of Chinese text): neither whitespace nor a marker.
const HAN: u8 = 4;

static CLASS: [u8; 256] = {
    let mut t = [PLAIN; 256];
    t[b'\t' as usize] = SPACE;
    t[b'\n' as usize] = SPACE;
    t[0x0B] = SPACE;
    t[0x0C] = SPACE;
    t[b'\r' as usize] = SPACE;
    t[b' ' as usize] = SPACE;
    t[0xC2] = MAYBE_SPACE;
    t[0xE1] = MAYBE_SPACE;
    t[0xE2] = MAYBE_SPACE;
    t[0xE3] = MAYBE_SPACE;
    t[b'*' as usize] = MARKER;
    t[b'_' as usize] = MARKER;
    t[b'`' as usize] = MARKER;
    t[b'~' as usize] = MARKER;
    t[b'[' as usize] = MARKER;
    let mut lead = 0xE4;
    while lead <= 0xE9 {
        t[lead] = HAN;
        lead += 1;
    }
    t
};

#[inline]
fn class(b: u8) -> u8 {
    CLASS[b as usize]
}

/// The length in bytes of the whitespace character starting at `bytes[i]`, or 0
/// if it is not whitespace. Exactly `char::is_whitespace` (Unicode `White_Space`):
/// the ASCII ones, U+0085, U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F,
/// U+205F and U+3000.
#[inline]
fn space_len(bytes: &[u8], i: usize) -> usize {
    match class(bytes[i]) {
        SPACE => 1,
        MAYBE_SPACE => {
            let next = |k: usize| bytes.get(i + k).copied().unwrap_or(0);
            let space = match bytes[i] {
                0xC2 => matches!(next(1), 0x85 | 0xA0),
                0xE1 => next(1) == 0x9A && next(2) == 0x80,
                0xE2 => match next(1) {
                    0x80 => matches!(next(2), 0x80..=0x8A | 0xA8 | 0xA9 | 0xAF),
                    0x81 => next(2) == 0x9F,
                    _ => false,
                },
                _ => next(1) == 0x80 && next(2) == 0x80, // 0xE3: U+3000
            };
            if !space {
                0
            } else if bytes[i] == 0xC2 {
                2
            } else {
                3
            }
        }
        _ => 0,
    }
}

/// What [`fold_whitespace_into`] did.
#[derive(Debug, PartialEq, Eq)]
enum Folded {
    /// Appended nothing (the line is blank).
    Nothing,
    /// Appended the folded line.
    Some,
    /// Stopped at a markdown marker (when asked to); `out` must be rolled back.
    Marker,
}

/// Collapse every run of whitespace (Unicode `White_Space`) to one ASCII space,
/// trim the ends, and append the result to `out`. With `stop_at_marker`, give up
/// at the first markdown marker instead.
fn fold_whitespace_into(line: &str, out: &mut String, stop_at_marker: bool) -> Folded {
    let bytes = line.as_bytes();
    let mut any = false;
    // The words from `copy` to `end` and the single ASCII spaces between
    // them: what `out` gets, as it is, at the next other whitespace or at
    // the end.
    let (mut copy, mut end) = (0, 0);
    let mut i = 0;
    loop {
        // Skip whitespace.
        let space = i;
        loop {
            if i == bytes.len() {
                out.push_str(&line[copy..end]);
                return if any { Folded::Some } else { Folded::Nothing };
            }
            let len = space_len(bytes, i);
            if len == 0 {
                break;
            }
            i += len;
        }
        if !any {
            copy = i;
        } else if i != space + 1 || bytes[space] != b' ' {
            out.push_str(&line[copy..end]);
            out.push(' ');
            copy = i;
        }
        // A word runs to the next whitespace. (Continuation bytes are PLAIN, and
        // whitespace starts at a character boundary, so slicing there is safe.)
        while i < bytes.len() {
            let c = class(bytes[i]);
            if c == HAN {
                i += 3;
            } else if c == PLAIN {
                i += 1;
            } else if c == MARKER {
                if stop_at_marker {
                    return Folded::Marker;
                }
                i += 1;
            } else if space_len(bytes, i) == 0 {
                i += 1;
            } else {
                break;
            }
        }
        end = i;
        any = true;
    }
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn lines_agree_with_std() {
        for len in [0, 1, 31, 32, 33, 64, 100] {
            for at in [0, 1, 30, 31, 32, 33, 63, 64, 99] {
                let mut text = "x".repeat(len);
                if at < len {
                    text.replace_range(at..=at, "\n");
                }
                let text = format!("{text}\n中\n\r\n{text}");
                assert!(super::lines_inclusive(&text).eq(text.split_inclusive('\n')));
                assert!(super::lines_inclusive(&text[..len]).eq(text[..len].split_inclusive('\n')));
            }
        }
        assert_eq!(super::lines_inclusive("").count(), 0);
    }

    #[test]
    fn strips_comments_bold_and_blank_lines() {
        let raw = "<!--repaste.body.begin-->\n\n**央视网消息**（新闻联播）：今天。\n\n\n第二段。<!--repaste.body.end-->";
        assert_eq!(normalize(raw), "央视网消息(新闻联播):今天。\n第二段。");
    }

    #[test]
    fn strips_tags_and_decodes_entities() {
        let raw = "<div class=\"a\"><p>Tom &amp; Jerry</p><p>said&nbsp;hi</p></div>";
        assert_eq!(normalize(raw), "Tom & Jerry\nsaid hi");
    }

    #[test]
    fn drops_script_and_style_content() {
        let raw = "before<script>var x = '<p>';</script><STYLE>p{}</STYLE>after";
        assert_eq!(normalize(raw), "beforeafter");
    }

    #[test]
    fn keeps_less_than_that_is_not_a_tag() {
        assert_eq!(normalize("a < b and 3<4"), "a < b and 3<4");
        assert_eq!(normalize("x <y without end"), "x <y without end");
    }

    #[test]
    fn nfkc_folds_full_width() {
        assert_eq!(normalize("ＡＢＣ１２３，"), "ABC123,");
    }

    #[test]
    fn fast_nfkc_agrees_with_the_general_algorithm() {
        use unicode_normalization::UnicodeNormalization;
        for text in [
            "中文，“引号”《书名》（括号）——破折号·间隔",
            "Ｆｕｌｌ　ｗｉｄｔｈ and ascii",
            "…省略 Ⅲ ℃ ﬁ e\u{301} 가 ｶﾀｶﾅ",
            "Ａ\u{301}",
            "A\u{30A} and e\u{301}\u{301}, \u{1100}\u{1161}\u{11A8} 中\u{301}",
            "\u{301} leading mark, nbsp\u{A0}here… Ⅻ ℃\u{301}x",
            "末尾…",
            "…",
            "a…b…c…\u{327}\u{301}",
        ] {
            let general: String = text.nfkc().collect();
            assert_eq!(super::nfkc(text), general, "{text}");
        }
    }

    #[test]
    fn space_len_is_unicode_white_space() {
        for c in ('\u{0}'..='\u{FFFF}').chain('\u{10000}'..='\u{10FFF}') {
            let mut buf = [0; 4];
            let s = c.encode_utf8(&mut buf);
            let expected = if c.is_whitespace() { s.len() } else { 0 };
            assert_eq!(
                super::space_len(s.as_bytes(), 0),
                expected,
                "U+{:04X}",
                c as u32
            );
        }
    }

    #[test]
    fn folding_and_markdown_agree_with_the_plain_recipe() {
        // The recipe as the spec states it, with the standard library.
        fn plain(line: &str) -> String {
            let mut buf = String::new();
            super::strip_markdown_line(line, &mut buf)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        }
        for line in [
            "",
            "  \t ",
            "a  b\u{A0}c\u{3000}d\u{2028}e\u{85}f\u{1680}g\u{202F}h\u{205F}i\u{2009}j",
            "  **bold** and _em_ snake_case ~~x~~ `code` [link](u) [no",
            "# title ## > quote",
            "- item",
            "+ item  ",
            "中文\u{3001}标点\u{3002} 、。《》「」",
            "\u{E3}\u{E2}\u{C2}",
        ] {
            let mut out = String::new();
            let mut buf = String::new();
            let body = super::strip_markdown_prefix(line);
            let folded = match super::fold_whitespace_into(body, &mut out, true) {
                super::Folded::Marker => {
                    out.clear();
                    let body = super::strip_markdown_markers(body, &mut buf);
                    super::fold_whitespace_into(body, &mut out, false)
                }
                f => f,
            };
            assert_eq!(out, plain(line), "{line:?}");
            assert_eq!(folded == super::Folded::Some, !out.is_empty(), "{line:?}");
        }
    }

    #[test]
    fn lines_like_str_lines() {
        assert_eq!(normalize("a\r\nb\rc\r\n\r\nd\r"), "a\nb c\nd");
    }

    #[test]
    fn markdown_links_headings_and_snake_case() {
        assert_eq!(
            normalize("## Title\n> quoted _em_ [link](http://x.y) snake_case ~~gone~~"),
            "Title\nquoted em link snake_case gone"
        );
    }

    #[test]
    fn unterminated_comment_swallows_rest() {
        assert_eq!(normalize("keep<!-- never closed"), "keep");
    }

    #[test]
    fn empty_and_whitespace_only() {
        assert_eq!(normalize(""), "");
        assert_eq!(normalize(" \n\t <br/> "), "");
    }
}
