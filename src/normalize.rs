//! Text normalization: the first step of fingerprint v1 (see `docs/fingerprint.md`).
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
    let decoded = html_escape::decode_html_entities(&without_tags);
    // Entities may have produced markup-like text ("&lt;b&gt;"); it is text now and stays.
    let nfkc = nfkc(&decoded);
    let mut out = String::with_capacity(nfkc.len());
    for line in nfkc.lines() {
        let line = strip_markdown_line(line);
        let folded = fold_whitespace(&line);
        if folded.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&folded);
    }
    out
}

/// Unicode NFKC, fast for CJK text.
///
/// Full-width ASCII forms (U+FF01–FF5E) and the ideographic space (U+3000) are
/// nearly all the compatibility characters Chinese text has. NFKC maps each to one
/// ASCII character, and replacing a character by its compatibility decomposition
/// before normalizing does not change the result, so they are mapped directly; the
/// general algorithm then runs only if the quick check says something else needs it.
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
    for (i, c) in text.char_indices() {
        if let Some(ascii) = full_width(c) {
            let out = mapped.get_or_insert_with(|| String::with_capacity(text.len()));
            out.push_str(&text[last..i]);
            out.push(ascii);
            last = i + c.len_utf8();
        } else if !stable(c) {
            all_stable = false;
        }
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
    match unicode_normalization::is_nfkc_quick(mapped.chars()) {
        unicode_normalization::IsNormalized::Yes => mapped,
        _ => Cow::Owned(mapped.nfkc().collect()),
    }
}

/// Remove HTML comments, tags and the content of script-like elements.
///
/// A `<` only opens a tag when followed by a letter, `/`, `!` or `?`, so text such as
/// "a < b" or "<3" survives. Block-level tags become a line break.
fn strip_html(text: &str) -> Cow<'_, str> {
    if !text.contains('<') {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut last = 0;
    while let Some(off) = text[i..].find('<') {
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
        let Some(close) = text[start..].find('>') else {
            // "<abc" with no `>`: not a tag, keep it as text.
            i = start + 1;
            last = start;
            continue;
        };
        let end = start + close + 1;
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
/// (`[text](url)` keeps `text`).
fn strip_markdown_line(line: &str) -> Cow<'_, str> {
    let trimmed = line.trim_start();
    let body = trimmed
        .trim_start_matches('#')
        .trim_start_matches('>')
        .trim_start();
    let body = match body.strip_prefix("- ").or_else(|| body.strip_prefix("+ ")) {
        Some(rest) => rest,
        None => body,
    };
    if !body.contains(['*', '_', '`', '~', '[']) {
        return Cow::Borrowed(body);
    }
    let bytes = body.as_bytes();
    let mut out = String::with_capacity(body.len());
    let mut i = 0;
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
                let link = body[i + 1..].find(']').and_then(|close| {
                    let close = i + 1 + close;
                    let rest = body[close + 1..].strip_prefix('(')?;
                    let paren = rest.find(')')?;
                    Some((close, close + 2 + paren + 1))
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
                let next = body[after..]
                    .find(['*', '`', '~', '_', '['])
                    .map_or(body.len(), |n| after + n);
                out.push_str(&body[i..next]);
                i = next;
            }
        }
    }
    Cow::Owned(out)
}

/// Collapse every run of whitespace to one ASCII space and trim the ends.
fn fold_whitespace(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for word in line.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::normalize;

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
        ] {
            let general: String = text.nfkc().collect();
            assert_eq!(super::nfkc(text), general, "{text}");
        }
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
