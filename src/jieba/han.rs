/// Han as jieba-rs's segmenter sees it (its `is_cjk`): the characters of the
/// blocks it looks dictionary words up in. Shared by `build.rs`, which keeps only
/// the words made of them, and by `src/dictionary.rs`, which cuts such blocks.
#[inline]
pub fn is_jieba_han(c: char) -> bool {
    // The main block first: nearly every character of Chinese text is in it.
    matches!(c, '\u{4E00}'..='\u{9FFF}')
        || matches!(c,
            '\u{3400}'..='\u{4DBF}'
            | '\u{F900}'..='\u{FAFF}'
            | '\u{20000}'..='\u{2A6DF}'
            | '\u{2A700}'..='\u{2B73F}'
            | '\u{2B740}'..='\u{2B81F}'
            | '\u{2B820}'..='\u{2CEAF}'
            | '\u{2CEB0}'..='\u{2EBEF}'
            | '\u{2F800}'..='\u{2FA1F}'
        )
}
