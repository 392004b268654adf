//! Progress bars (indicatif) while scheduling and firing; silent with `--quiet`.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Makes the bars of a run, or hidden ones when quiet.
#[derive(Clone, Debug)]
pub struct Progress {
    quiet: bool,
}

impl Progress {
    /// Bars on stderr, unless `quiet`.
    pub fn new(quiet: bool) -> Progress {
        Progress { quiet }
    }

    /// A bar counting up to `len` (timers scheduled or fired).
    pub fn counter(&self, len: u64, label: &str) -> ProgressBar {
        self.bar(
            len,
            label,
            "{msg:32} [{bar:30}] {human_pos:>10}/{human_len:10} {per_sec:>14} eta {eta}",
        )
    }

    /// A bar that fills over `span` of waiting.
    pub fn timer(&self, span: Duration, label: &str) -> ProgressBar {
        let bar = self.bar(
            span.as_millis() as u64,
            label,
            "{msg:32} [{bar:30}] {elapsed}",
        );
        if !self.quiet {
            let ticker = bar.clone();
            std::thread::spawn(move || {
                while !ticker.is_finished() && ticker.position() < ticker.length().unwrap_or(0) {
                    std::thread::sleep(Duration::from_millis(100));
                    ticker.inc(100);
                }
            });
        }
        bar
    }

    /// Prints a line above the bars (nothing when quiet).
    pub fn say(&self, line: &str) {
        if !self.quiet {
            eprintln!("{line}");
        }
    }

    fn bar(&self, len: u64, label: &str, template: &str) -> ProgressBar {
        if self.quiet {
            return ProgressBar::hidden();
        }
        let style = ProgressStyle::with_template(template)
            .expect("constant template is valid")
            .progress_chars("=> ");
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr_with_hz(5));
        bar.set_style(style);
        bar.set_message(label.to_string());
        bar
    }
}
