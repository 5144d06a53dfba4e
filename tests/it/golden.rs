//! Golden vectors for fingerprint v3 (`docs/fingerprint.md`).
//!
//! These pin the recipe: normalization, jieba segmentation and its dictionary,
//! the stop-word lists, jieba's IDF table, SipHash keys, fixed-point weights and the
//! clause sketch and the number sketch. If one changes, that is a new fingerprint version: bump
//! `FINGERPRINT_VERSION`, document the change, and only then update these values.

use std::collections::BTreeMap;

use simdedup::distinctive::{number_hash, numbers};
use simdedup::fingerprint::{Fingerprinter, FINGERPRINT_VERSION};
use simdedup::idf::IdfTable;
use simdedup::normalize::normalize;
use simdedup::simhash::{hash_bytes, SIP_KEY_0, SIP_KEY_1};
use simdedup::tokenize::Tokenizer;

struct Golden {
    name: &'static str,
    text: &'static str,
    simhash: &'static str,
    content: &'static str,
    signatures: &'static [&'static str],
    numbers: &'static [&'static str],
    shingles: &'static [&'static str],
    size: u16,
    words: u32,
}

const GOLDEN: &[Golden] = &[
    Golden {
        name: "zh_news_markup",
        text: "<!--repaste.body.begin-->\n\n**央视网消息**（新闻联播）：国家统计局今天（4月16日）发布数据，一季度国内生产总值同比增长5.3%，比上年四季度环比增长1.6%。\n\n国家统计局新闻发言人表示，一季度国民经济实现良好开局，为实现全年目标任务打下了较好基础。工业生产较快增长，服务业持续恢复，市场销售稳定增长。<!--repaste.body.end-->",
        simhash: "8887b3df23b4b5e5",
        content: "a5190c68a5f212f3",
        signatures: &["5d328a9a", "6c51090e", "7a39cc90", "d00f2e8c", "f4ca4981"],
        numbers: &["1786", "74ac", "834a", "e8ab"],
        shingles: &["0384", "039d", "04a3", "0510", "09ff", "0aee", "0b27", "0d1a", "1ab3", "220f", "2e52", "360b", "3cb0", "4c43", "4c8f", "4dec", "5343", "557b", "55f5", "5ef1", "6185", "6f40", "84cd", "899d", "8b90", "8dea", "96f1", "9c13", "9ed0", "9f88", "a5a4", "a9d2", "b498", "bfd5", "c17e", "c1eb", "c96f", "ca90", "ce4a", "d04c", "d235", "d434", "e550", "e892", "e8a9", "eb03", "f2dc", "fa60", "fe17"],
        size: 127,
        words: 40,
    },
    Golden {
        name: "en_news",
        text: "Quarterly profits at the media giant jumped 76% to $1.13bn for the three months to December, from $639m a year earlier.\n\nThe firm, which is now one of the biggest investors in search, benefited from sales of high-speed internet connections and higher advert sales. It said fourth quarter sales rose 2% to $11.1bn from $10.9bn.",
        simhash: "7003a2629d8cb090",
        content: "4edc5ee70c71052d",
        signatures: &["5a8b614c", "a0aced22", "ad889a46", "cf75ca15", "ef3501eb"],
        numbers: &["3ad0", "51a1", "6dd6", "858e", "d3d2", "dc14"],
        shingles: &["1d3c", "3b50", "45f7", "4a2d", "4e7f", "6cc6", "7294", "76da", "76e1", "7761", "8a61", "91a1", "a780", "ab9f", "ae9f", "b3b2", "b8a5", "bc3b", "cde6", "dc18", "debe", "e03d", "e5cb", "eefe", "f056", "fcef"],
        size: 177,
        words: 33,
    },
    Golden {
        name: "mixed_html",
        text: "<html><head><style>p{color:red}</style></head><body><h1>苹果发布 iPhone&nbsp;16</h1><p>苹果公司在加州库比蒂诺发布了新款iPhone 16手机，售价799美元起。</p><p>The new phone ships on <b>September 20</b>, with Apple Intelligence features arriving later.</p></body></html>",
        simhash: "ed689314030f62f2",
        content: "206423ec14d216a3",
        signatures: &["5ad33f58", "6c0968ca", "9e098ee0", "d7f1e191"],
        numbers: &["6544", "e8ab", "f594"],
        shingles: &["0b65", "100b", "15d8", "1ec4", "1f41", "305d", "345a", "397a", "4caa", "8e2c", "ac47", "b1f1", "b243", "b8ba", "ba4e", "c595", "c997", "e4bf", "edfa", "f792", "f81c", "fc3d"],
        size: 81,
        words: 26,
    },
    Golden {
        name: "short",
        text: "北京今天降雪，交通部门提醒市民注意出行安全。",
        simhash: "85b7495bf10ae366",
        content: "b329798eb76ab68f",
        signatures: &["261af16e"],
        numbers: &[],
        shingles: &["1e69", "4f18", "612b", "6a0e", "bd23"],
        size: 20,
        words: 8,
    },
    Golden {
        name: "punctuation_only",
        text: "。。。！！！ -- ... <br/>",
        simhash: "0000000000000000",
        content: "5cf2c6af7d459ee5",
        signatures: &[],
        numbers: &[],
        shingles: &[],
        size: 0,
        words: 0,
    },
    Golden {
        name: "numbers",
        text: "Net 2,764,000 vs 2,540,000. Shr 61 cts, 3.7 pct; H1N1 on 10日, item 1. and 2,x; ４２ and ٤٢.",
        simhash: "c541001b49da1600",
        content: "0748b5017d864587",
        signatures: &[],
        numbers: &["4749", "858e", "95f6", "d452", "dd49", "e934", "ee41", "f264"],
        shingles: &["23ff", "448a", "730e", "7c1d", "91f9", "9625", "ea94"],
        size: 76,
        words: 14,
    },
    Golden {
        name: "unicode_key",
        text: "İSTANBUL, Straße ΣΟΦΙΑ: Ünal's café reopened today after the long renovation.",
        simhash: "b642e39500ac80e9",
        content: "8f3e80e55b4f4fcd",
        signatures: &["6f417411", "dd208700"],
        numbers: &[],
        shingles: &["01b1", "71eb", "8678", "95fb", "dee0", "f02e"],
        size: 36,
        words: 9,
    },
];

/// `H("新闻")`, computed once; other implementations can check their SipHash against it.
const NEWS_HASH: &str = "cccef3ae64a1d28e";

#[test]
fn version_is_3() {
    assert_eq!(FINGERPRINT_VERSION, 3);
}

/// The Unicode versions `docs/fingerprint.md` names for properties, lowercase
/// mappings, word boundaries and NFKC.
#[test]
fn unicode_versions_are_the_documented_ones() {
    assert_eq!(char::UNICODE_VERSION, (17, 0, 0));
    assert_eq!(unicode_segmentation::UNICODE_VERSION, (17, 0, 0));
    assert_eq!(unicode_normalization::UNICODE_VERSION, (18, 0, 0));
}

/// Normalization (§1 of the spec), one vector per rule a port could read another
/// way: (what the case pins, input, normalized output).
const NORMALIZED: &[(&str, &str, &str)] = &[
    // Step 1: HTML.
    (
        "tag names end at other than letters, digits, - and :",
        "a<p-x>b</ p>c<br/>d",
        "abc\nd",
    ),
    (
        "block tags of any case, opening or closing",
        "<p>one</p><P class=x>two",
        "one\ntwo",
    ),
    (
        "<!--> opens a comment without closing it",
        "x<!-->y-->z",
        "xz",
    ),
    (
        "<!---> too, and an open comment runs to the end",
        "x<!--->y",
        "x",
    ),
    (
        "</scriptx> closes a script (prefix match)",
        "a<script>b</scriptx>c</script>d",
        "acd",
    ),
    (
        "the closing tag is found in any case",
        "a<SCRIPT>b</Script >c",
        "ac",
    ),
    (
        "an unclosed style runs to the end",
        "a<style>never closed",
        "a",
    ),
    (
        "< not before a letter, /, ! or ?, or without a later >, is text",
        "1 < 2, <3, < p> and <b",
        "1 < 2, <3, < p> and <b",
    ),
    (
        "a tag ends at the first >, even in quotes",
        "<a title=\"x>y\">link</a>",
        "y\">link",
    ),
    // Step 2: entities.
    (
        "two-code-point entities keep their first code point",
        "&fjlig; &nvlt; &bne;",
        "f < =",
    ),
    (
        "only references ending in ; decode; & restarts the scan",
        "&amp &amp;lt; AT&T; &#65;&#x42;&#X43;",
        "&amp &lt; AT&T; ABC",
    ),
    (
        "NUL, C0 controls, surrogates, out-of-range numbers stay text",
        "a&#0;b&#1;c&#xD800;d&#1114112;e&#99999999999;f&#9;g",
        "a&#0;b&#1;c&#xD800;d&#1114112;e&#99999999999;f g",
    ),
    (
        "&#128;-&#159; are the C1 controls, not Windows-1252",
        "x&#150;y",
        "x\u{96}y",
    ),
    (
        "malformed and unknown references stay text",
        "&#;&#x;&#12a;&foo;",
        "&#;&#x;&#12a;&foo;",
    ),
    (
        "a decoded line break splits lines",
        "line&#10;break",
        "line\nbreak",
    ),
    (
        "decoded markup is text",
        "&lt;b&gt;bold&lt;/b&gt;",
        "<b>bold</b>",
    ),
    // Steps 3-4: NFKC, prefixes, one-pass markdown, whitespace.
    (
        "whitespace is White_Space (NFKC maps some to a space); ZWSP is not",
        "a\u{A0}b\u{2003}c\u{3000}d\u{200B}e\u{85}f",
        "a b c d\u{200B}e f",
    ),
    (
        "# then > then whitespace, then one bullet",
        "##>>  - + item",
        "+ item",
    ),
    (
        "a space before > stops the prefix",
        "## > quoted",
        "> quoted",
    ),
    (
        "_ looks at its neighbours in the original line",
        "alpha_*beta snake_case",
        "alphabeta snake_case",
    ),
    (
        "alphanumeric is Unicode Alphabetic or N*",
        "é_ü ٣_x 中_文 a_。 _x_",
        "é_ü ٣_x 中_文 a。 x",
    ),
    (
        "link text is copied as is",
        "[al*pha](beta) done",
        "al*pha done",
    ),
    (
        "a link runs from [ to the first ] then ( to the first )",
        "[a [b](c) d",
        "a [b d",
    ),
    (
        "no ( right after ], or no ), is no link",
        "[no link] (x) [open](never",
        "[no link] (x) [open](never",
    ),
    (
        "~~ is dropped, a single ~ is text",
        "~~struck~~ ~one~ ~~~x",
        "struck ~one~ ~x",
    ),
    (
        "* and ` are dropped",
        "`code` and **bold**",
        "code and bold",
    ),
];

/// §6: what a number is, and its 16-bit hash.
#[test]
fn numbers_are_found_as_specified() {
    let text = normalize(GOLDEN.iter().find(|g| g.name == "numbers").unwrap().text);
    let found: Vec<&str> = numbers(&text).collect();
    assert_eq!(
        found,
        [
            "2,764,000",
            "2,540,000",
            "61",
            "3.7",
            "1",
            "1",
            "10",
            "1",
            "2",
            "42"
        ]
    );
    // The top 16 bits of the SipHash-1-3 of the number's own bytes.
    assert_eq!(
        format!("{:016x}", hash_bytes(b"2,764,000")),
        "4749123959ca38d3"
    );
    assert_eq!(format!("{:04x}", number_hash("2,764,000")), "4749");
    assert_eq!(format!("{:04x}", number_hash("2024")), "23c7");
}

#[test]
fn normalization_vectors() {
    let failures: Vec<String> = NORMALIZED
        .iter()
        .filter_map(|&(case, input, want)| {
            let got = normalize(input);
            (got != want).then(|| format!("{case}: {input:?} gave {got:?}, want {want:?}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn sip_keys_are_the_documented_constants() {
    assert_eq!(SIP_KEY_0, 0x7075_6465_646d_6973);
    assert_eq!(SIP_KEY_1, 0x3176_746e_6972_7066);
    // SipHash-1-3 (not 2-4) under these keys, over the raw bytes with nothing appended.
    assert_eq!(format!("{:016x}", hash_bytes("新闻".as_bytes())), NEWS_HASH);
}

#[test]
fn golden_vectors() {
    let fp = Fingerprinter::with_defaults().unwrap();
    let mut failures = Vec::new();
    for g in GOLDEN {
        let f = fp.fingerprint(g.text);
        let got = (
            format!("{:016x}", f.simhash),
            format!("{:016x}", f.content),
            f.signatures
                .iter()
                .map(|s| format!("{s:08x}"))
                .collect::<Vec<_>>(),
            f.numbers
                .iter()
                .map(|n| format!("{n:04x}"))
                .collect::<Vec<_>>(),
            f.shingles
                .iter()
                .map(|v| format!("{v:04x}"))
                .collect::<Vec<_>>(),
            f.size,
            f.words,
        );
        let want = (
            g.simhash.to_owned(),
            g.content.to_owned(),
            g.signatures
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
            g.numbers.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            g.shingles.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            g.size,
            g.words,
        );
        if got != want {
            failures.push(format!("{}: got {got:?}, want {want:?}", g.name));
        }
    }
    assert!(
        failures.is_empty(),
        "fingerprint v3 changed:\n{}",
        failures.join("\n")
    );
}

/// Step 4 of the spec written out independently: count words, weigh them with the
/// IDF table, quantize, accumulate. It must agree with the library on every vector.
#[test]
fn simhash_follows_the_written_recipe() {
    let fp = Fingerprinter::with_defaults().unwrap();
    let idf = IdfTable::builtin();
    let tokenizer = Tokenizer::new(false);
    for g in GOLDEN {
        let mut tf: BTreeMap<String, u32> = BTreeMap::new();
        for w in tokenizer.words(&normalize(g.text)) {
            *tf.entry(w).or_insert(0) += 1;
        }
        let mut counters = [0i64; 64];
        for (word, n) in &tf {
            let q = ((f64::from(*n) * idf.get(word) * 1000.0).round() as i64).max(1);
            let h = hash_bytes(word.as_bytes());
            for (i, c) in counters.iter_mut().enumerate() {
                *c += if h >> i & 1 == 1 { q } else { -q };
            }
        }
        let expected =
            counters
                .iter()
                .enumerate()
                .fold(0u64, |acc, (i, &c)| if c > 0 { acc | 1 << i } else { acc });
        assert_eq!(format!("{expected:016x}"), g.simhash, "{}", g.name);
        assert_eq!(fp.fingerprint(g.text).simhash, expected, "{}", g.name);
    }
}
