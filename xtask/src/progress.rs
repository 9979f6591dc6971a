//! Progress bars for the commands that run longer than a few seconds
//! (bench, report, soak, sim on large scenarios): drawn on stderr, and
//! hidden when stderr is not a terminal or the command was given
//! `--quiet`, so what goes to stdout (tables, JSON) and what tests read
//! stays as it was.

use std::io::IsTerminal;

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
}
