//! Strings as the kernel programs read them from a process: NUL-terminated bytes ([`c_text`]) or
//! a `wchar_t` string ([`wide_text`]).

/// The text of string bytes read by the kernel, up to their NUL (lossy UTF-8).
pub fn c_text(bytes: &[u8]) -> String {
    c_str(bytes).into_owned()
}

/// [`c_text`], borrowed from `bytes` when they are valid UTF-8. A string cut at the bytes kept
/// (63, or no NUL at all) loses a character the cut split instead of ending in U+FFFD.
pub fn c_str(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let mut text = &bytes[..end];
    let cut = end == bytes.len() || end + 1 >= xtrace_common::event::ARG_STR_LEN;
    if let Err(e) = std::str::from_utf8(text) {
        // No error length: the bytes end inside a character.
        if cut && e.error_len().is_none() {
            text = &text[..e.valid_up_to()];
        }
    }
    String::from_utf8_lossy(text)
}

/// A `wchar_t` string (UTF-32, native byte order) up to its NUL or the end of `bytes`; characters
/// that are no Unicode scalar value become U+FFFD.
pub fn wide_text(bytes: &[u8]) -> String {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&c| c != 0)
        .map(|c| char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::c_text;

    /// A string cut at 63 bytes inside a character ends before it; invalid bytes elsewhere are
    /// U+FFFD as ever.
    #[test]
    fn a_cut_string_does_not_end_in_half_a_character() {
        let mut cut = vec![b'L'; 61];
        cut.extend("日日".as_bytes());
        cut.truncate(63);
        cut.push(0);
        assert_eq!(c_text(&cut), "L".repeat(61));
        assert_eq!(c_text(b"ab\xe6\x97\0"), "ab\u{fffd}");
        assert_eq!(c_text(b"\xffok\0"), "\u{fffd}ok");
        assert_eq!(c_text("日本".as_bytes()), "日本");
    }
}
