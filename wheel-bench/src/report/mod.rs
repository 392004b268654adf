//! The report: everything a run shows and writes, made from its results.
//!
//! [`write_all`] makes the [`tables`] (cells formatted by [`format`](mod@format), laid out by [`table`]),
//! the `.hgrm` histograms ([`hgrm`]), the SVG plots ([`plot`]), report.md ([`markdown`]) and
//! results.json, writes them ([`outputs`]), and returns the text the terminal shows
//! ([`console`]; [`lines`] are what both show).

use std::path::Path;

use crate::harness::result::{RunResult, Skipped};
use crate::host::machine::Machine;
use crate::options::Options;

mod console;
pub(crate) mod format;
pub(crate) mod hgrm;
mod lines;
mod markdown;
pub(crate) mod outputs;
mod plot;
mod table;
mod tables;

/// What [`write_all`] produced.
pub(crate) struct Written {
    /// The tables and problems as the terminal shows them.
    pub text: String,
    /// Files written, relative to the output directory.
    pub files: Vec<String>,
}

/// Writes every file of the report into `out_dir` and returns the terminal's text.
pub(crate) fn write_all(
    out_dir: &Path,
    options: &Options,
    machine: &Machine,
    results: &[RunResult],
    skipped: &[Skipped],
) -> Result<Written, String> {
    let tables = tables::all_tables(options, results, skipped);
    let mut files = outputs::write_hgrms(out_dir, results)?;
    files.extend(outputs::write_plots(out_dir, results, &options.scenarios)?);
    files.push("report.md".into());
    files.push("results.json".into());
    let markdown = markdown::markdown(options, machine, &tables, results, &files);
    outputs::write(&out_dir.join("report.md"), &markdown)?;
    let json = outputs::ResultsFile {
        machine,
        options,
        runs: results,
        skipped,
        files: &files,
    };
    outputs::write_json(out_dir, &json)?;
    let text = console::console_text(options, machine, &tables, results);
    Ok(Written { text, files })
}
