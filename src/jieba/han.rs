/// The trie code of a Han character no dictionary word contains. Codes are
/// below 2^14 (`build.rs` checks), so no node has a child by this code: the
/// walk ends at it.
pub const NO_CODE: u16 = u16::MAX;
/// The trie code of a character that is not Han to jieba ([`is_jieba_han`]).
pub const NOT_HAN: u16 = u16::MAX - 1;

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
