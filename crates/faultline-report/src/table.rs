//! A plain table of strings with two renderings.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table as Comfy};

/// Rows of cells under a header.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Table {
    /// Column titles.
    pub header: Vec<String>,
    /// One vector of cells per row, as long as the header.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with the given column titles.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn push<S: Into<String>>(&mut self, row: impl IntoIterator<Item = S>) {
        self.rows.push(row.into_iter().map(Into::into).collect());
    }

    /// Renders for a terminal with box-drawing borders.
    pub fn to_terminal(&self) -> String {
        let mut t = Comfy::new();
        t.load_style(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header(&self.header);
        for row in &self.rows {
            t.add_row(row);
        }
        t.to_string()
    }

    /// Renders as a GitHub-flavoured Markdown table (pipes in cells are escaped).
    pub fn to_markdown(&self) -> String {
        let esc = |s: &str| s.replace('|', "\\|").replace('\n', " ");
        let mut out = format!(
            "| {} |\n|{}|\n",
            self.header
                .iter()
                .map(|h| esc(h))
                .collect::<Vec<_>>()
                .join(" | "),
            self.header
                .iter()
                .map(|_| "---")
                .collect::<Vec<_>>()
                .join("|")
        );
        for row in &self.rows {
            out.push_str(&format!(
                "| {} |\n",
                row.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | ")
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_escapes_pipes() {
        let mut t = Table::new(["a", "b"]);
        t.push(["x|y", "z"]);
        assert_eq!(t.to_markdown(), "| a | b |\n|---|---|\n| x\\|y | z |\n");
        assert!(t.to_terminal().contains("x|y"));
    }
}
