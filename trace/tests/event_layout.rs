//! A payload layout decoded once per metadata record (`EventLayout`, in the dispatcher's
//! shared table) reads every event's fields as the core's walker does over the record parsed
//! again, on real captures (.NET 8 and Core 3.1 counters: EventCounters' nested `Payload`
//! object, the Metrics provider's strings).

use std::path::PathBuf;

use dsipc::nettrace::{Event, PayloadFields, Value};
use dsipc_trace::{EventInfo, TraceContext, TraceDispatcher, TraceSink};

/// Compares, for every event, the layout's fields with the walker's.
#[derive(Default)]
struct Compare {
    events: u64,
    fields: u64,
    mismatches: Vec<String>,
}

/// The walker's fields, nested objects flattened, as (name, value) text.
fn walk(fields: PayloadFields<'_>, out: &mut Vec<(String, String)>) {
    for f in fields {
        let f = f.expect("the walker reads the payload");
        match f.value {
            Value::Object(o) => walk(o.fields(), out),
            v => out.push((f.name.to_string(), format!("{:?}", v))),
        }
    }
}

impl TraceSink for Compare {
    fn event(&mut self, e: &Event<'_>, info: Option<&EventInfo>, _: &TraceContext<'_>) {
        let info = match info {
            Some(i) => i,
            None => return,
        };
        let layout = info
            .layout
            .as_ref()
            .expect("well-formed field descriptions");
        assert!(layout.is_flat(), "{} has arrays", info.meta.name);
        let mut by_layout = Vec::new();
        layout
            .read(e.payload, |f, v| {
                by_layout.push((f.name.to_string(), format!("{:?}", v)))
            })
            .expect("the layout reads the payload");
        let mut by_walker = Vec::new();
        let rec = info.meta.record().expect("the record parses again");
        walk(rec.fields.walk(e.payload), &mut by_walker);
        self.events += 1;
        self.fields += by_layout.len() as u64;
        if by_layout != by_walker {
            self.mismatches.push(format!(
                "{}: {:?} vs {:?}",
                info.meta.name, by_layout, by_walker
            ));
        }
    }
}

#[test]
fn event_layouts_read_payloads_as_the_walker_does() {
    for name in [
        "net8.0.4-system-runtime-and-meter.nettrace",
        "netcore3.1.23-system-runtime.nettrace",
        "net8.0.4-meter-guid-session.nettrace",
    ] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/data/counters")
            .join(name);
        let bytes = std::fs::read(&path).unwrap();
        let mut d = TraceDispatcher::new();
        let mut c = Compare::default();
        d.feed(&bytes, &mut c).expect("parses");
        d.finish(&mut c).expect("ends cleanly");
        assert!(c.mismatches.is_empty(), "{}: {:?}", name, c.mismatches);
        assert!(
            c.events > 5 && c.fields > c.events * 3,
            "{}: {} events, {} fields",
            name,
            c.events,
            c.fields
        );
        // EventCounters' fields are those of its nested objects (two deep), flattened.
        let ec = d
            .metadata()
            .values()
            .find(|i| i.meta.name == "EventCounters");
        if let Some(ec) = ec {
            let names: Vec<&str> = ec
                .layout
                .as_ref()
                .unwrap()
                .fields()
                .iter()
                .map(|f| &*f.name)
                .collect();
            assert!(
                names.contains(&"Name") && names.contains(&"DisplayUnits"),
                "{:?}",
                names
            );
            assert_eq!(ec.layout.as_ref().unwrap().depth(), 2, "{:?}", ec.layout);
        }
    }
}
