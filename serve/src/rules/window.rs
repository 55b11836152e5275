//! The time logic of the triggers, as dotnet/diagnostics implements it
//! (Microsoft.Diagnostics.Monitoring.EventPipe/Triggers):
//!
//! - [`HeldCondition`]: an EventCounter/EventMeter trigger is satisfied when *every* sample
//!   since the start of the window passed the threshold: the series starts at the first
//!   passing sample (its interval's start), breaks on a failing sample or on a gap of more
//!   than 1.5 requested intervals, and is satisfied once the latest sample's time reaches
//!   the series start plus `SlidingWindowDuration`.
//! - [`SlidingWindow`]: the ASP.NET triggers count events in the window (events less than
//!   a second apart are merged into one entry).
//! - [`GlobMatcher`]: `IncludePaths`/`ExcludePaths` (`**/` any number of segments, `*` any
//!   characters but `/`, without case; an exclude wins).

use std::collections::VecDeque;
use std::time::Duration;

fn nanos(d: Duration) -> i128 {
    d.as_nanos() as i128
}

/// The state of a threshold that must hold for a window of samples.
#[derive(Debug, Clone)]
pub struct HeldCondition {
    interval: i128,
    window: i128,
    latest: Option<i128>,
    target: Option<i128>,
}

impl HeldCondition {
    /// A condition over samples requested every `interval`, held for `window`.
    pub fn new(interval: Duration, window: Duration) -> HeldCondition {
        HeldCondition {
            interval: nanos(interval),
            window: nanos(window),
            latest: None,
            target: None,
        }
    }

    /// Takes a sample taken at `at` over `sample_interval` that did or did not pass the
    /// threshold; returns whether the condition is now satisfied.
    pub fn sample(&mut self, at: Duration, sample_interval: Duration, passes: bool) -> bool {
        let at = nanos(at);
        if !passes {
            self.latest = None;
            self.target = None;
            return false;
        }
        // A gap of more than 1.5 intervals means a sample was lost: the series restarts.
        let restart = match (self.target, self.latest) {
            (Some(_), Some(latest)) => latest + self.interval * 3 / 2 < at,
            _ => true,
        };
        if restart {
            // The series starts where the first passing sample's interval started.
            self.target = Some(at - nanos(sample_interval) + self.window);
        }
        self.latest = Some(at);
        match (self.latest, self.target) {
            (Some(l), Some(t)) => l >= t,
            _ => false,
        }
    }
}

/// The most entries a window keeps: entries are at least a second apart and the window
/// is at most a day (`SlidingWindowDuration`'s maximum), so 86,401 entries at worst.
const MERGE_INTERVAL: Duration = Duration::from_secs(1);

/// A count of events within a sliding window of time.
#[derive(Debug, Clone)]
pub struct SlidingWindow {
    window: Duration,
    points: VecDeque<(Duration, u64)>,
    count: u64,
}

impl SlidingWindow {
    /// An empty window of `window`.
    pub fn new(window: Duration) -> SlidingWindow {
        SlidingWindow {
            window,
            points: VecDeque::new(),
            count: 0,
        }
    }

    /// The events within the window (as of the latest event added).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Adds an event at `at` (events are expected in time order; an earlier one is merged
    /// with the latest entry).
    pub fn add(&mut self, at: Duration) {
        self.count += 1;
        if let Some(last) = self.points.back_mut() {
            if at.saturating_sub(last.0) < MERGE_INTERVAL {
                last.1 += 1;
                return;
            }
        }
        self.points.push_back((at, 1));
        while let Some(&(first, n)) = self.points.front() {
            if at.saturating_sub(first) > self.window {
                self.points.pop_front();
                self.count -= n;
            } else {
                break;
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// One character, compared without case.
    Char(char),
    /// `*`: any run of characters other than `/`.
    Star,
    /// `**/`: any run of whole segments, each ending with `/`.
    Segments,
}

fn compile(pattern: &str) -> Vec<Token> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut tokens = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '*' && chars.get(i + 1) == Some(&'*') && chars.get(i + 2) == Some(&'/') {
            tokens.push(Token::Segments);
            i += 3;
        } else if chars[i] == '*' {
            tokens.push(Token::Star);
            i += 1;
        } else {
            tokens.extend(chars[i].to_lowercase().map(Token::Char));
            i += 1;
        }
    }
    tokens
}

/// Whether `path` (lowercased chars) matches `tokens` from start to end. Dynamic
/// programming over (token, position): time and memory are tokens × path length, never
/// exponential whatever the pattern.
fn matches(tokens: &[Token], path: &[char]) -> bool {
    let n = path.len();
    // reach[j]: the tokens so far can consume exactly path[..j].
    let mut reach = vec![false; n + 1];
    reach[0] = true;
    for token in tokens {
        let mut next = vec![false; n + 1];
        match token {
            Token::Char(c) => {
                for j in 0..n {
                    if reach[j] && path[j] == *c {
                        next[j + 1] = true;
                    }
                }
            }
            Token::Star => {
                for j in 0..=n {
                    if reach[j] || (j > 0 && next[j - 1] && path[j - 1] != '/') {
                        next[j] = true;
                    }
                }
            }
            Token::Segments => {
                // Zero segments, or any run ending with '/' from a reachable point.
                let mut open = false;
                for j in 0..=n {
                    if reach[j] {
                        open = true;
                        next[j] = true;
                    }
                    if j < n && open && path[j] == '/' {
                        next[j + 1] = true;
                    }
                }
            }
        }
        reach = next;
    }
    reach[n]
}

/// `IncludePaths`/`ExcludePaths` of an ASP.NET trigger.
#[derive(Debug, Clone, Default)]
pub struct GlobMatcher {
    include: Option<Vec<Vec<Token>>>,
    exclude: Option<Vec<Vec<Token>>>,
}

impl GlobMatcher {
    /// A matcher of these patterns (absent or empty include: every path).
    pub fn new(include: Option<&[String]>, exclude: Option<&[String]>) -> GlobMatcher {
        let build = |p: Option<&[String]>| {
            p.filter(|p| !p.is_empty())
                .map(|p| p.iter().map(|s| compile(s)).collect())
        };
        GlobMatcher {
            include: build(include),
            exclude: build(exclude),
        }
    }

    /// Whether a request to `path` counts.
    pub fn is_match(&self, path: &str) -> bool {
        let lowered: Vec<char> = path.chars().flat_map(char::to_lowercase).collect();
        let any = |set: &Vec<Vec<Token>>| set.iter().any(|t| matches(t, &lowered));
        if self.exclude.as_ref().map_or(false, any) {
            return false;
        }
        self.include.as_ref().map_or(true, any)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn held_condition_fires_when_every_sample_of_the_window_passes() {
        // 5 s samples, a 10 s window: passing samples at 5, 10, 15 (series starts at 0).
        let mut c = HeldCondition::new(S(5), S(10));
        assert!(!c.sample(S(5), S(5), true));
        assert!(c.sample(S(10), S(5), true));
        // A failing sample breaks the series.
        let mut c = HeldCondition::new(S(5), S(10));
        assert!(!c.sample(S(5), S(5), true));
        assert!(!c.sample(S(10), S(5), false));
        // The series restarts at 10 s (the interval of the sample at 15 s).
        assert!(!c.sample(S(15), S(5), true));
        assert!(c.sample(S(20), S(5), true));
    }

    #[test]
    fn held_condition_breaks_on_a_failing_sample_even_between_intervals() {
        let mut c = HeldCondition::new(S(5), S(10));
        assert!(!c.sample(S(5), S(5), true));
        assert!(!c.sample(S(8), S(5), false));
        // Within 1.5 intervals of the last passing sample, but the series was broken.
        assert!(!c.sample(S(10), S(5), true));
        assert!(c.sample(S(15), S(5), true));
    }

    #[test]
    fn held_condition_restarts_after_a_lost_sample() {
        let mut c = HeldCondition::new(S(5), S(15));
        assert!(!c.sample(S(5), S(5), true));
        assert!(!c.sample(S(10), S(5), true));
        // 8 s after the previous sample is more than 1.5 intervals: the series restarts.
        assert!(!c.sample(S(18), S(5), true));
        assert!(!c.sample(S(23), S(5), true));
        assert!(c.sample(S(28), S(5), true));
    }

    #[test]
    fn sliding_window_counts_events_within_the_window() {
        let mut w = SlidingWindow::new(S(60));
        for t in 0..5 {
            w.add(S(t * 10));
        }
        assert_eq!(w.count(), 5);
        w.add(S(61)); // the event at 0 is more than 60 s before.
        assert_eq!(w.count(), 5);
        w.add(S(200));
        assert_eq!(w.count(), 1);
        // Events less than a second apart share one entry and one fate.
        let mut w = SlidingWindow::new(S(1));
        w.add(Duration::from_millis(0));
        w.add(Duration::from_millis(900));
        // 900 ms alone would still be within a second of 1,800 ms: merged, it leaves.
        w.add(Duration::from_millis(1_800));
        assert_eq!(w.count(), 1);
    }

    #[test]
    fn request_paths_match_globs_as_dotnet_monitor_documents() {
        let m = |inc: &[&str], exc: &[&str], path: &str| {
            let inc: Vec<String> = inc.iter().map(|s| s.to_string()).collect();
            let exc: Vec<String> = exc.iter().map(|s| s.to_string()).collect();
            GlobMatcher::new(Some(&inc), Some(&exc)).is_match(path)
        };
        assert!(m(&["**/*"], &[], "/any/path"));
        assert!(m(&["/images/**/*"], &[], "/images/logo.png"));
        assert!(m(&["/images/**/*"], &[], "/images/products/1.png"));
        assert!(!m(&["/images/**/*"], &[], "/index/header.png"));
        assert!(m(&["**/*.js"], &[], "/script.js"));
        assert!(m(&["**/*.js"], &[], "/path/sub/script.js"));
        assert!(!m(&["**/*.js"], &[], "/script.js/page.html"));
        assert!(m(&["**/sub/*.html"], &[], "/path/sub/page.html"));
        assert!(m(&["**/sub/*.html"], &[], "/sub/page.html"));
        assert!(!m(&["**/sub/*.html"], &[], "/sub/script.js"));
        assert!(m(&["/API/**/*"], &[], "/api/values"));
        assert!(!m(&["/api/**/*"], &["/api/health"], "/api/health"));
        assert!(m(&[], &[], "/whatever"));
    }
}
