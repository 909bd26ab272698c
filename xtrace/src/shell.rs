//! A launched command's argv as one line a POSIX shell (bash, for `$'…'`) reads back as the same
//! words, for the attach notice and summary.txt: `python3 -c $'import os\nos.getpid()'`, not
//! a command split over lines or with its argument boundaries lost.

/// `argv` quoted word by word and joined with spaces.
pub fn quote_words<S: AsRef<str>>(argv: &[S]) -> String {
    argv.iter()
        .map(|word| quote(word.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One word: as it is when it holds only characters no shell treats specially, in `$'…'` with
/// escapes when it holds control characters (a newline would break the line), else in single
/// quotes.
fn quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=+,@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    if word.chars().any(char::is_control) {
        let mut out = String::from("$'");
        for c in word.chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('\'');
        return out;
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_come_back_as_they_were() {
        assert_eq!(quote_words(&["./spans", "spin", "100"]), "./spans spin 100");
        assert_eq!(quote_words(&["echo", "a b", ""]), "echo 'a b' ''");
        assert_eq!(
            quote_words(&["sh", "-c", "echo 'hi' $HOME"]),
            r"sh -c 'echo '\''hi'\'' $HOME'"
        );
        assert_eq!(
            quote_words(&["python3", "-c", "import os\nprint('x')\t\\"]),
            r"python3 -c $'import os\nprint(\'x\')\t\\'"
        );
        assert_eq!(quote_words(&["a\x07"]), r"$'a\x07'");
        assert_eq!(quote_words(&["tête"]), "'tête'");
    }

    /// bash reads each quoted line back as the same words.
    #[test]
    fn bash_reads_the_words_back() {
        let argv = ["a b", "it's", "x\ny\tz\\", "", "$HOME", "-c", "tête"];
        let script = format!("for w in {}; do printf '<%s>' \"$w\"; done", quote_words(&argv));
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .output()
            .expect("running bash");
        let expected: String = argv.iter().map(|w| format!("<{w}>")).collect();
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
    }
}
