//! Progress on stderr: a bar on a terminal, otherwise a line every few seconds
//! (so a log of a long run still shows how it went).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Progress of one long step (`total` items).
pub struct Progress {
    bar: Option<ProgressBar>,
    what: String,
    total: u64,
    started: Instant,
    last_line: Instant,
    every: Duration,
}

impl Progress {
    /// `enabled = false`: silent.
    pub fn new(what: &str, total: u64, enabled: bool) -> Progress {
        let bar = (enabled && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new(total);
            let style = ProgressStyle::with_template(
                "{prefix} [{bar:30}] {human_pos}/{human_len} {per_sec} eta {eta} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(what.to_owned());
            bar
        });
        let every = if enabled {
            Duration::from_secs(10)
        } else {
            Duration::MAX
        };
        Progress {
            bar,
            what: what.to_owned(),
            total,
            started: Instant::now(),
            last_line: Instant::now(),
            every,
        }
    }

    /// `done` items so far; `note` (e.g. Redis memory) is shown with it.
    pub fn update(&mut self, done: u64, note: &str) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            bar.set_message(note.to_owned());
            return;
        }
        if self.last_line.elapsed() < self.every {
            return;
        }
        self.last_line = Instant::now();
        let secs = self.started.elapsed().as_secs_f64();
        let rate = done as f64 / secs.max(1e-9);
        let eta = self.total.saturating_sub(done) as f64 / rate.max(1e-9);
        eprintln!(
            "simdedup-bench: {} {done}/{} ({:.0}/s, eta {:.0} s) {note}",
            self.what, self.total, rate, eta
        );
    }

    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
