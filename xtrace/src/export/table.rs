//! Plain-text tables (summary.txt, `xtrace report`, `xtrace diff`): columns padded to their widest cell, the
//! first `left` columns left-aligned and the rest (numbers) right-aligned, two spaces apart; and the
//! same tables in Markdown, for a pull-request comment (`xtrace diff --markdown`, `xtrace gate`).
use crate::output::stdio::escape_controls;

/// The table as lines, header first; nothing when there are no rows.
pub fn render(header: &[&str], rows: &[Vec<String>], left: usize) -> String {
    if rows.is_empty() {
        return String::new();
    }
    // A name with a newline or a terminal escape in it (an NVTX message, say) stays in its cell.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| escape_controls(c).into_owned()).collect())
        .collect();
    // Columns on a terminal: a CJK character or an emoji takes two, a combining mark none.
    let columns = |cell: &str| unicode_width::UnicodeWidthStr::width(cell);
    let mut widths: Vec<usize> = header.iter().map(|h| columns(h)).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(columns(cell));
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.zip(&widths).enumerate() {
            let pad = " ".repeat(width - columns(cell));
            if i < left {
                text += &format!("{cell}{pad}  ");
            } else {
                text += &format!("{pad}{cell}  ");
            }
        }
        text.trim_end().to_string() + "\n"
    };
    let mut out = line(&mut header.iter().copied());
    for row in &rows {
        out += &line(&mut row.iter().map(String::as_str));
    }
    out
}

/// The table in GitHub-flavoured Markdown, header first, the first `left` columns left-aligned
/// and the rest right-aligned; nothing when there are no rows. `|` in a cell is escaped, and a
/// line break or control character shown escaped, so that a cell never breaks the table.
pub fn markdown(header: &[&str], rows: &[Vec<String>], left: usize) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let cell = |c: &str| escape_controls(c).replace('|', "\\|");
    let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
    let mut out = line(header.iter().map(|h| cell(h)).collect());
    let align = (0..header.len()).map(|i| {
        if i < left {
            ":--".to_string()
        } else {
            "--:".to_string()
        }
    });
    out += &line(align.collect());
    for row in rows {
        out += &line(row.iter().map(|c| cell(c)).collect());
    }
    out
}

/// A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break.
pub fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_columns() {
        let rows = vec![
            vec!["a".to_string(), "1".to_string()],
            vec!["long".to_string(), "100".to_string()],
        ];
        assert_eq!(
            render(&["NAME", "N"], &rows, 1),
            "NAME    N\na       1\nlong  100\n"
        );
        assert_eq!(render(&["NAME"], &[], 1), "");
        assert_eq!(csv_field("a,b\"c"), "\"a,b\"\"c\"");
        assert_eq!(csv_field("plain"), "plain");
    }

    #[test]
    fn markdown_tables() {
        let rows = vec![
            vec!["a|b".to_string(), "1".to_string()],
            vec!["c\nd".to_string(), "22".to_string()],
        ];
        assert_eq!(
            markdown(&["NAME", "N"], &rows, 1),
            "| NAME | N |\n| :-- | --: |\n| a\\|b | 1 |\n| c\\nd | 22 |\n"
        );
        assert_eq!(markdown(&["NAME"], &[], 1), "");
    }

    #[test]
    fn control_characters_stay_in_their_cell() {
        let rows = vec![vec!["w\nx\u{1b}[2J".to_string(), "1".to_string()]];
        assert_eq!(
            render(&["NAME", "N"], &rows, 1),
            "NAME           N\nw\\nx\\u{1b}[2J  1\n"
        );
        assert_eq!(escape_controls("plain"), "plain");
        // Wide and zero-width characters are padded by the columns they take.
        let rows = vec![
            vec!["训练".to_string(), "1".to_string()],
            vec!["e\u{301}".to_string(), "22".to_string()],
        ];
        assert_eq!(
            render(&["NAME", "N"], &rows, 1),
            "NAME   N\n训练   1\ne\u{301}     22\n"
        );
        assert_eq!(escape_controls("tab\there"), "tab\\there");
    }
}
