//! Progress bars on stderr for long phases (benchmark load and queries,
//! `strata load`, the engine benchmark), drawn with `indicatif`:
//! `phase [#####.....] count/total  pct%  rate/s  ETA`. Drawn only when
//! stderr is a terminal (silent when it is redirected, so logs and tests
//! see nothing), and cleared when the phase ends.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Counts of steps (`{pos}/{len}`).
const COUNT: &str = "{msg} [{bar:20}] {pos}/{len} {percent:>3}%  {per_sec}  ETA {eta}";
/// Bytes of input (`{bytes}/{total_bytes}`).
const BYTES: &str =
    "{msg} [{bar:20}] {bytes}/{total_bytes} {percent:>3}%  {bytes_per_sec}  ETA {eta}";

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar for `total` steps of `phase`.
    pub fn new(phase: impl Into<String>, total: u64) -> Progress {
        Progress::with_output(phase, total, COUNT, std::io::stderr().is_terminal())
    }

    /// A bar for `total` bytes of input read in `phase`.
    pub fn bytes(phase: impl Into<String>, total: u64) -> Progress {
        Progress::with_output(phase, total, BYTES, std::io::stderr().is_terminal())
    }

    fn with_output(
        phase: impl Into<String>,
        total: u64,
        template: &str,
        enabled: bool,
    ) -> Progress {
        let target = if enabled {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total), target);
        // The templates are constants: a bad one is a bug caught by the
        // tests; fall back to indicatif's default style rather than fail.
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("#."));
        }
        bar.set_message(phase.into());
        Progress { bar }
    }

    /// Prints `msg` as a line on stderr when it is a terminal (a phase
    /// without a count, e.g. "calibrating query sets").
    pub fn note(msg: &str) {
        if std::io::stderr().is_terminal() {
            eprintln!("{msg}");
        }
    }

    /// Reports `done` steps (or bytes); indicatif limits the redraw rate.
    pub fn tick(&mut self, done: u64) {
        self.bar.set_position(done);
    }

    /// Changes the total (a phase whose amount of work moves, e.g. an
    /// online index build while compactions change the tables).
    pub fn set_total(&mut self, total: u64) {
        self.bar.set_length(total);
    }

    /// Clears the bar (the next output starts on a clean line).
    pub fn finish(&mut self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_valid() {
        for t in [COUNT, BYTES] {
            assert!(ProgressStyle::with_template(t).is_ok(), "{t}");
        }
    }

    #[test]
    fn silent_when_disabled() {
        let mut p = Progress::with_output("x", 10, COUNT, false);
        assert!(p.bar.is_hidden());
        p.tick(5);
        assert_eq!(p.bar.position(), 5);
        p.finish();
        assert!(p.bar.is_finished());
    }
}
