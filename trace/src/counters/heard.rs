//! [`Heard`]: which of the names a session asked for have published. A misspelt counter or
//! provider is otherwise an empty table forever: the runtime says nothing of names it
//! does not know.

use super::{CounterSet, Sample};

/// The names of a [`CounterSet`] (each provider asked for whole, each counter asked for by
/// name) and whether a sample of each has arrived.
#[derive(Debug, Clone)]
pub struct Heard {
    /// (provider, counter or `None` for any of the provider's), heard yet.
    wanted: Vec<(String, Option<String>, bool)>,
}

impl Heard {
    /// Nothing heard yet of what `set` asks for.
    pub fn new(set: &CounterSet) -> Heard {
        let mut wanted = Vec::new();
        for p in set.providers() {
            match &p.counters {
                None => wanted.push((p.name.clone(), None, false)),
                Some(list) => {
                    for c in list {
                        wanted.push((p.name.clone(), Some(c.clone()), false));
                    }
                }
            }
        }
        Heard { wanted }
    }

    /// Notes `sample` (names compare ASCII case-insensitively, as [`CounterSet::includes`]).
    pub fn sample(&mut self, sample: &Sample) {
        for (provider, counter, heard) in &mut self.wanted {
            if !*heard
                && provider.eq_ignore_ascii_case(&sample.provider)
                && counter
                    .as_deref()
                    .map_or(true, |c| c.eq_ignore_ascii_case(&sample.name))
            {
                *heard = true;
            }
        }
    }

    /// What has not published yet, as it was asked for (`Provider`, `Provider[counter]`).
    pub fn silent(&self) -> Vec<String> {
        self.wanted
            .iter()
            .filter(|(_, _, heard)| !heard)
            .map(|(p, c, _)| match c {
                Some(c) => format!("{}[{}]", p, c),
                None => p.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{CounterKind, Source};

    fn sample(provider: &str, name: &str) -> Sample {
        Sample {
            timestamp: std::time::SystemTime::UNIX_EPOCH,
            provider: provider.into(),
            name: name.into(),
            display_name: name.into(),
            unit: String::new(),
            kind: CounterKind::Mean,
            value: 1.0,
            tags: Vec::new(),
            interval_secs: 1.0,
            source: Source::EventCounter,
        }
    }

    #[test]
    fn names_that_never_published_are_silent() {
        let set =
            CounterSet::parse("System.Runtime[cpu-usage,cpu-usag],System.Runtim,MyMeter").unwrap();
        let mut heard = Heard::new(&set);
        assert_eq!(
            heard.silent(),
            [
                "System.Runtime[cpu-usage]",
                "System.Runtime[cpu-usag]",
                "System.Runtim",
                "MyMeter"
            ]
        );
        heard.sample(&sample("system.runtime", "CPU-Usage"));
        heard.sample(&sample("MyMeter", "requests"));
        assert_eq!(
            heard.silent(),
            ["System.Runtime[cpu-usag]", "System.Runtim"]
        );
    }
}
