//! [`Table`]: rows of text cells, printed aligned for a terminal or as Markdown.

/// A titled table of text cells.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column headers.
    pub fn new(title: impl Into<String>, headers: &[&str]) -> Table {
        Table {
            title: title.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells print empty).
    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    fn widths(&self) -> Vec<usize> {
        (0..self.headers.len())
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .chain(std::iter::once(&self.headers[c]))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    /// Aligned text: the first column left, the others right.
    pub fn to_text(&self) -> String {
        let widths = self.widths();
        let line = |cells: &[String]| {
            let padded: Vec<String> = widths
                .iter()
                .enumerate()
                .map(|(c, w)| {
                    let cell = cells.get(c).map_or("", String::as_str);
                    if c == 0 {
                        format!("{cell:<w$}")
                    } else {
                        format!("{cell:>w$}")
                    }
                })
                .collect();
            padded.join("  ").trim_end().to_string()
        };
        let mut out = format!("{}\n{}\n", self.title, line(&self.headers));
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        out.push_str(&rule.join("  "));
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }

    /// A Markdown table under a `###` heading.
    pub fn to_markdown(&self) -> String {
        let row = |cells: &[String]| {
            let cells: Vec<&str> = (0..self.headers.len())
                .map(|c| cells.get(c).map_or("", String::as_str))
                .collect();
            format!("| {} |\n", cells.join(" | "))
        };
        let mut out = format!("### {}\n\n", self.title);
        out.push_str(&row(&self.headers));
        let rule: Vec<&str> = (0..self.headers.len())
            .map(|c| if c == 0 { "---" } else { "---:" })
            .collect();
        out.push_str(&format!("| {} |\n", rule.join(" | ")));
        for r in &self.rows {
            out.push_str(&row(r));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_aligns_and_markdown_has_a_rule() {
        let mut t = Table::new("T", &["system", "rate"]);
        t.push(vec!["wheel".into(), "12 M/s".into()]);
        t.push(vec!["binary-heap".into(), "2 M/s".into()]);
        let text = t.to_text();
        assert!(text.contains("wheel        12 M/s"), "{text}");
        assert!(text.contains("binary-heap   2 M/s"), "{text}");
        let md = t.to_markdown();
        assert!(
            md.contains("| system | rate |\n| --- | ---: |\n| wheel | 12 M/s |"),
            "{md}"
        );
    }
}
