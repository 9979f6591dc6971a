//! Progress bars for the commands that run longer than a few seconds
//! (bench, report, soak, sim on large scenarios): drawn on stderr, and
//! hidden when stderr is not a terminal or the command was given
//! `--quiet`, so what goes to stdout (tables, JSON) and what tests read
//! stays as it was.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Would a bar be drawn?
pub fn shown(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal()
}

/// A bar of `len` steps named `what` (hidden: see the module's doc).
pub fn bar(len: u64, what: &str, quiet: bool) -> ProgressBar {
    if !shown(quiet) {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({elapsed}, {eta} left)")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// Print a line on stdout without tearing the bar (it is drawn again
/// below the line).
pub fn println(pb: &ProgressBar, line: &str) {
    pb.suspend(|| crate::emit(&format!("{line}\n")));
}

/// A bar for a long run's progress callbacks (a scenario, the soak): it
/// appears once the run has taken 2 s of wall time, on a terminal only,
/// and is cleared when dropped (before the run's summary is printed).
pub struct RunBar {
    label: String,
    start: Instant,
    quiet: bool,
    bar: Option<ProgressBar>,
}

impl RunBar {
    pub fn new(label: &str, quiet: bool) -> RunBar {
        RunBar { label: label.to_string(), start: Instant::now(), quiet, bar: None }
    }

    /// Is a bar (to be) drawn? When not, callers may print lines instead.
    pub fn shown(&self) -> bool {
        shown(self.quiet)
    }

    /// `done` of `total` messages; `what` describes the rest (called only
    /// when a bar is drawn).
    pub fn update(&mut self, done: u64, total: u64, what: impl FnOnce() -> String) {
        if !self.shown() {
            return;
        }
        if self.bar.is_none() && self.start.elapsed() >= Duration::from_secs(2) {
            self.bar = Some(bar(total, &self.label, self.quiet).with_elapsed(self.start.elapsed()));
        }
        if let Some(b) = &self.bar {
            b.set_length(total);
            b.set_position(done);
            b.set_message(format!("{} {}", self.label, what()));
        }
    }
}

impl Drop for RunBar {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_hides_the_bar() {
        let pb = bar(10, "x", true);
        assert!(pb.is_hidden());
        assert!(!shown(true));
    }

    #[test]
    fn a_bar_is_hidden_when_stderr_is_not_a_terminal() {
        // Under the test harness stderr is a pipe or a file unless run
        // from a terminal with --nocapture; the bar follows it either way.
        let pb = bar(10, "x", false);
        assert_eq!(pb.is_hidden(), !std::io::stderr().is_terminal());
    }

    #[test]
    fn a_quiet_run_bar_never_draws() {
        let mut r = RunBar::new("x", true);
        r.start -= Duration::from_secs(5);
        r.update(1, 2, || unreachable!("described only when drawn"));
        assert!(r.bar.is_none() && !r.shown());
    }
}
