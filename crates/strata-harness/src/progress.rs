//! A one-line progress bar on stderr for long benchmark phases:
//! `phase [#####.....] count/total  rate/s  ETA`, redrawn with `\r` at most
//! ten times a second, and only when stderr is a terminal (silent when it
//! is redirected, so logs and tests see nothing).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

const REDRAW: Duration = Duration::from_millis(100);
const BAR: usize = 20;

pub struct Progress {
    enabled: bool,
    phase: String,
    total: u64,
    start: Instant,
    last: Option<Instant>,
    width: usize,
}

impl Progress {
    /// A bar for `total` steps of `phase` (drawn on the first tick).
    pub fn new(phase: impl Into<String>, total: u64) -> Progress {
        Progress::with_output(phase, total, std::io::stderr().is_terminal())
    }

    fn with_output(phase: impl Into<String>, total: u64, enabled: bool) -> Progress {
        Progress {
            enabled,
            phase: phase.into(),
            total,
            start: Instant::now(),
            last: None,
            width: 0,
        }
    }

    /// Reports `done` steps; redraws if 100 ms passed since the last draw.
    pub fn tick(&mut self, done: u64) {
        if !self.enabled || self.last.is_some_and(|t| t.elapsed() < REDRAW) {
            return;
        }
        self.last = Some(Instant::now());
        let line = render(&self.phase, done, self.total, self.start.elapsed());
        self.draw(&line);
    }

    /// Clears the bar (the next output starts on a clean line).
    pub fn finish(&mut self) {
        if self.enabled && self.width > 0 {
            self.draw("");
            self.width = 0;
        }
    }

    fn draw(&mut self, line: &str) {
        let pad = self.width.saturating_sub(line.chars().count());
        let mut e = std::io::stderr().lock();
        // Progress output is best effort: a closed stderr must not fail a run.
        let _ = write!(e, "\r{line}{:pad$}\r", "");
        let _ = e.flush();
        self.width = line.chars().count();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// One progress line.
fn render(phase: &str, done: u64, total: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    let frac = if total == 0 {
        1.0
    } else {
        (done as f64 / total as f64).min(1.0)
    };
    let filled = (frac * BAR as f64).round() as usize;
    let eta = if rate > 0.0 && done < total {
        format!("ETA {}", clock((total - done) as f64 / rate))
    } else {
        String::new()
    };
    format!(
        "{phase} [{}{}] {done}/{total} {:>3.0}%  {}/s  {eta}",
        "#".repeat(filled),
        ".".repeat(BAR - filled),
        frac * 100.0,
        human(rate)
    )
}

fn clock(secs: f64) -> String {
    let s = secs.round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

fn human(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.1}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_count_rate_and_eta() {
        let l = render("load", 500, 1000, Duration::from_secs(2));
        assert!(
            l.starts_with("load [##########..........] 500/1000  50%"),
            "{l}"
        );
        assert!(l.contains("250/s") && l.contains("ETA 0m02s"), "{l}");
        let l = render("q", 10, 10, Duration::from_millis(1));
        assert!(l.contains("100%") && !l.contains("ETA"), "{l}");
        assert!(render("x", 0, 0, Duration::ZERO).contains("100%"));
        assert_eq!(clock(3725.0), "1h02m");
        assert_eq!(human(12_345.0), "12.3k");
    }

    #[test]
    fn silent_when_disabled() {
        let mut p = Progress::with_output("x", 10, false);
        p.tick(5);
        p.finish();
        assert_eq!(p.width, 0);
    }
}
