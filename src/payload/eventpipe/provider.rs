//! The items a session enables: providers, event filters, and user_events tracepoints.

use crate::error::{DecodeError, EncodeError};
use crate::wire::{text_len, Reader, Seq, Text, WireItem, Writer};

use super::MAX_LEVEL;

/// A provider to enable: `keywords, logLevel, provider_name, arguments`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Provider<'a> {
    /// Keywords to enable.
    pub keywords: u64,
    /// Level, 0 (log always) to 5 (verbose).
    pub log_level: u32,
    /// Provider name; must be non-empty.
    pub provider_name: Text<'a>,
    /// `key=value;...` arguments, or [`Text::Null`].
    pub arguments: Text<'a>,
}

impl<'a> Provider<'a> {
    /// A provider with no arguments.
    pub fn new(name: &'a str, keywords: u64, log_level: u32) -> Self {
        Provider {
            keywords,
            log_level,
            provider_name: Text::Str(name),
            arguments: Text::Null,
        }
    }

    pub(super) fn validate(&self) -> Result<(), EncodeError> {
        if self.log_level > MAX_LEVEL {
            return Err(EncodeError::InvalidField {
                field: "log_level",
                reason: "must be 0 to 5",
            });
        }
        if self.provider_name.is_empty() {
            return Err(EncodeError::InvalidField {
                field: "provider_name",
                reason: "must not be empty or null",
            });
        }
        Ok(())
    }
}

impl<'a> WireItem<'a> for Provider<'a> {
    fn encoded_len(&self) -> usize {
        12 + text_len(&self.provider_name) + text_len(&self.arguments)
    }
    fn encode(&self, w: &mut Writer<'_>) {
        w.u64(self.keywords);
        w.u32(self.log_level);
        w.text(&self.provider_name);
        w.text(&self.arguments);
    }
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(Provider {
            keywords: r.u64("keywords")?,
            log_level: r.u32("log_level")?,
            provider_name: r.text("provider_name")?,
            arguments: r.text("arguments")?,
        })
    }
}

/// An `event_filter`: enable or disable a list of event ids (CollectTracing5+).
/// `enable = false` with no ids (the default) enables every event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct EventFilter<'a> {
    /// True: only the listed ids are enabled. False: the listed ids are disabled.
    pub enable: bool,
    /// Event ids.
    pub event_ids: Seq<'a, u32>,
}

impl Default for EventFilter<'_> {
    fn default() -> Self {
        EventFilter {
            enable: false,
            event_ids: Seq::EMPTY,
        }
    }
}

impl<'a> WireItem<'a> for EventFilter<'a> {
    fn encoded_len(&self) -> usize {
        1 + self.event_ids.encoded_len()
    }
    fn encode(&self, w: &mut Writer<'_>) {
        w.bool(self.enable);
        self.event_ids.encode(w);
    }
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(EventFilter {
            enable: r.bool("enable")?,
            event_ids: Seq::decode(r, "event_ids")?,
        })
    }
}

/// A provider of a CollectTracing5/6 streaming session: a [`Provider`] plus an event filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct StreamingProvider<'a> {
    /// Keywords, level, name, arguments.
    pub provider: Provider<'a>,
    /// Which event ids to keep.
    pub filter: EventFilter<'a>,
}

impl<'a> WireItem<'a> for StreamingProvider<'a> {
    fn encoded_len(&self) -> usize {
        self.provider.encoded_len() + self.filter.encoded_len()
    }
    fn encode(&self, w: &mut Writer<'_>) {
        self.provider.encode(w);
        self.filter.encode(w);
    }
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(StreamingProvider {
            provider: Provider::decode(r)?,
            filter: EventFilter::decode(r)?,
        })
    }
}

/// A `tracepoint_set`: event ids written to one named user_events tracepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct TracepointSet<'a> {
    /// Tracepoint name; must be non-empty.
    pub tracepoint_name: Text<'a>,
    /// Event ids; must be non-empty.
    pub event_ids: Seq<'a, u32>,
}

impl<'a> WireItem<'a> for TracepointSet<'a> {
    fn encoded_len(&self) -> usize {
        text_len(&self.tracepoint_name) + self.event_ids.encoded_len()
    }
    fn encode(&self, w: &mut Writer<'_>) {
        w.text(&self.tracepoint_name);
        self.event_ids.encode(w);
    }
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(TracepointSet {
            tracepoint_name: r.text("tracepoint_name")?,
            event_ids: Seq::decode(r, "event_ids")?,
        })
    }
}

/// A `tracepoint_config`: where a user_events provider's events go. At least one of the
/// default name and the sets must be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct TracepointConfig<'a> {
    /// Tracepoint for enabled events not in any set, or [`Text::Null`].
    pub default_tracepoint_name: Text<'a>,
    /// Alternative tracepoints for sets of event ids.
    pub tracepoints: Seq<'a, TracepointSet<'a>>,
}

impl<'a> WireItem<'a> for TracepointConfig<'a> {
    fn encoded_len(&self) -> usize {
        text_len(&self.default_tracepoint_name) + self.tracepoints.encoded_len()
    }
    fn encode(&self, w: &mut Writer<'_>) {
        w.text(&self.default_tracepoint_name);
        self.tracepoints.encode(w);
    }
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(TracepointConfig {
            default_tracepoint_name: r.text("default_tracepoint_name")?,
            tracepoints: Seq::decode(r, "tracepoints")?,
        })
    }
}

/// A provider of a CollectTracing5 user_events session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct UserEventsProvider<'a> {
    /// Keywords, level, name, arguments.
    pub provider: Provider<'a>,
    /// Which event ids to keep.
    pub filter: EventFilter<'a>,
    /// Which tracepoints receive them.
    pub tracepoint_config: TracepointConfig<'a>,
}

impl<'a> WireItem<'a> for UserEventsProvider<'a> {
    fn encoded_len(&self) -> usize {
        self.provider.encoded_len()
            + self.filter.encoded_len()
            + self.tracepoint_config.encoded_len()
    }
    fn encode(&self, w: &mut Writer<'_>) {
        self.provider.encode(w);
        self.filter.encode(w);
        self.tracepoint_config.encode(w);
    }
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(UserEventsProvider {
            provider: Provider::decode(r)?,
            filter: EventFilter::decode(r)?,
            tracepoint_config: TracepointConfig::decode(r)?,
        })
    }
}
