//! Tests of `prom`.

use super::*;
use dsipc_trace::counters::Source;
use std::time::SystemTime;

fn sample(provider: &str, name: &str, kind: CounterKind, value: f64) -> Sample {
    Sample {
        timestamp: SystemTime::UNIX_EPOCH,
        provider: provider.into(),
        name: name.into(),
        display_name: name.into(),
        unit: String::new(),
        kind,
        value,
        tags: Vec::new(),
        interval_secs: 1.0,
        source: Source::Meter,
    }
}

fn with_unit(mut s: Sample, unit: &str) -> Sample {
    s.unit = unit.into();
    s
}

#[test]
fn help_and_label_text_escape_terminal_controls_visibly() {
    let mut help = String::new();
    escape_help("a\u{1b}[2J\u{7}\u{9b}\u{202e}\\b\nc", &mut help);
    // The format's escapes (\\ and \n), and each control as backslash-escaped text.
    assert_eq!(help, r"a\\x1b[2J\\x07\\x9b\\u{202e}\\b\nc");
    let mut label = String::new();
    escape_label("\"\u{1b}\u{2066}x", &mut label);
    assert_eq!(label, r#"\"\\x1b\\u{2066}x"#);
}

/// dotnet-monitor's own cases (PrometheusDataModelTests.TestGetPrometheusNormalizedName,
/// a missing unit being our empty one), and a few of ours.
#[test]
fn prometheus_names_follow_dotnet_monitor() {
    let rt = "System.Runtime";
    let asp = "Microsoft.AspNetCore.Hosting";
    for (provider, name, unit, metric) in [
        (rt, "cpu-usage", "%", "systemruntime_cpu_usage_ratio"),
        (rt, "working-set", "MB", "systemruntime_working_set_bytes"),
        (rt, "gc-heap-size", "MB", "systemruntime_gc_heap_size_bytes"),
        (
            rt,
            "gen-0-gc-count",
            "count",
            "systemruntime_gen_0_gc_count",
        ),
        (
            rt,
            "gen-1-gc-count",
            "count",
            "systemruntime_gen_1_gc_count",
        ),
        (
            rt,
            "gen-2-gc-count",
            "count",
            "systemruntime_gen_2_gc_count",
        ),
        (
            rt,
            "threadpool-thread-count",
            "",
            "systemruntime_threadpool_thread_count",
        ),
        (
            rt,
            "monitor-lock-contention-count",
            "count",
            "systemruntime_monitor_lock_contention_count",
        ),
        (
            rt,
            "threadpool-queue-length",
            "",
            "systemruntime_threadpool_queue_length",
        ),
        (
            rt,
            "threadpool-completed-items-count",
            "count",
            "systemruntime_threadpool_completed_items_count",
        ),
        (rt, "alloc-rate", "B", "systemruntime_alloc_rate_bytes"),
        (
            rt,
            "active-timer-count",
            "",
            "systemruntime_active_timer_count",
        ),
        (
            rt,
            "gc-fragmentation",
            "%",
            "systemruntime_gc_fragmentation_ratio",
        ),
        (rt, "gc-committed", "MB", "systemruntime_gc_committed_bytes"),
        (
            rt,
            "exception-count",
            "count",
            "systemruntime_exception_count",
        ),
        (rt, "time-in-gc", "%", "systemruntime_time_in_gc_ratio"),
        (rt, "gen-0-size", "B", "systemruntime_gen_0_size_bytes"),
        (rt, "gen-1-size", "B", "systemruntime_gen_1_size_bytes"),
        (rt, "gen-2-size", "B", "systemruntime_gen_2_size_bytes"),
        (rt, "loh-size", "B", "systemruntime_loh_size_bytes"),
        (rt, "poh-size", "B", "systemruntime_poh_size_bytes"),
        (rt, "assembly-count", "", "systemruntime_assembly_count"),
        (
            rt,
            "il-bytes-jitted",
            "B",
            "systemruntime_il_bytes_jitted_bytes",
        ),
        (
            rt,
            "methods-jitted-count",
            "",
            "systemruntime_methods_jitted_count",
        ),
        (rt, "time-in-jit", "ms", "systemruntime_time_in_jit_ms"),
        (
            asp,
            "requests-per-second",
            "count",
            "microsoftaspnetcorehosting_requests_per_second",
        ),
        (
            asp,
            "total-requests",
            "",
            "microsoftaspnetcorehosting_total_requests",
        ),
        (
            asp,
            "current-requests",
            "",
            "microsoftaspnetcorehosting_current_requests",
        ),
        (
            asp,
            "failed-requests",
            "",
            "microsoftaspnetcorehosting_failed_requests",
        ),
        (
            "Test-Provider",
            "Test-Metric",
            "b",
            "testprovider_Test_Metric_bytes",
        ),
        ("!@#", "#@#", "b", "______bytes"),
        (
            "Asp-Net-Provider",
            "Requests!Received",
            "0$customs",
            "aspnetprovider_Requests_Received___customs",
        ),
        ("a", "b", "", "a_b"),
        (
            "UnicodeάήΰLetter",
            "Unicode\u{0bef}Digit",
            "",
            "unicodeletter_Unicode_Digit",
        ),
        // Ours: units in any case, a Meter's own units, UTF-16 units of a character
        // outside the BMP, a leading digit.
        (rt, "working-set", "mb", "systemruntime_working_set_bytes"),
        (rt, "x", "COUNT", "systemruntime_x"),
        (
            "MyMeter",
            "requests",
            "requests",
            "mymeter_requests_requests",
        ),
        ("MyMeter", "latency", "ms", "mymeter_latency_ms"),
        (
            "Microsoft.AspNetCore.Server.Kestrel",
            "kestrel.active_connections",
            "{connection}",
            "microsoftaspnetcoreserverkestrel_kestrel_active_connections__connection_",
        ),
        ("P", "a\u{1F600}b", "", "p_a__b"),
        ("9x", "1", "", "x__"),
        ("-9x", "y", "", "_9x_y"),
        ("", "", "", "__"),
    ] {
        assert_eq!(
            metric_name(provider, name, unit),
            metric,
            "{} {} {}",
            provider,
            name,
            unit
        );
    }
}

/// PrometheusDataModelTests.TestGetPrometheusNormalizedValue, and the text of them.
#[test]
fn prometheus_values_scale_like_dotnet_monitor() {
    for (unit, value, text) in [
        ("", 225.0, "225"),
        ("MB", 9.0, "9000000"),
        ("mb", 112.0, "112000000"),
        ("B", 48.0, "48"),
        ("B", 178936.0, "178936"),
        ("b", 461142.0, "461142"),
        ("ms", 0.0, "0"),
        ("", 4.0, "4"),
        ("count", 10.0, "10"),
        ("%", 2.0, "2"),
        ("%", 0.691783039570667, "0.691783039570667"),
        ("%", 0.0, "0"),
    ] {
        assert_eq!(
            fmt_value(metric_value(unit, value)),
            text,
            "{} {}",
            unit,
            value
        );
    }
}

/// Every metric Grafana dashboard 19297 (made for dotnet-monitor) queries comes out of
/// the writer for samples as the runtimes publish them (the units are .NET 8's and
/// Core 3.1's DisplayUnits; an increment without units is decoded as `count`).
#[test]
fn prometheus_dashboard_19297_names_come_out_of_the_writer() {
    use CounterKind::*;
    let rt = "System.Runtime";
    let cases = [
        (
            rt,
            "working-set",
            Mean,
            "MB",
            40.5,
            "systemruntime_working_set_bytes",
            "40500000",
        ),
        (
            rt,
            "gc-heap-size",
            Mean,
            "MB",
            3.0,
            "systemruntime_gc_heap_size_bytes",
            "3000000",
        ),
        (
            rt,
            "cpu-usage",
            Mean,
            "%",
            12.5,
            "systemruntime_cpu_usage_ratio",
            "12.5",
        ),
        (
            "Microsoft.AspNetCore.Hosting",
            "requests-per-second",
            Sum,
            "count",
            17.0,
            "microsoftaspnetcorehosting_requests_per_second",
            "17",
        ),
        (
            rt,
            "exception-count",
            Sum,
            "count",
            2.0,
            "systemruntime_exception_count",
            "2",
        ),
        (
            rt,
            "threadpool-thread-count",
            Mean,
            "",
            4.0,
            "systemruntime_threadpool_thread_count",
            "4",
        ),
        (
            rt,
            "threadpool-queue-length",
            Mean,
            "",
            0.0,
            "systemruntime_threadpool_queue_length",
            "0",
        ),
        (
            rt,
            "gen-0-size",
            Mean,
            "B",
            24.0,
            "systemruntime_gen_0_size_bytes",
            "24",
        ),
        (
            rt,
            "gen-1-size",
            Mean,
            "B",
            25.0,
            "systemruntime_gen_1_size_bytes",
            "25",
        ),
        (
            rt,
            "gen-2-size",
            Mean,
            "B",
            26.0,
            "systemruntime_gen_2_size_bytes",
            "26",
        ),
        (
            rt,
            "poh-size",
            Mean,
            "B",
            27.0,
            "systemruntime_poh_size_bytes",
            "27",
        ),
        (
            rt,
            "loh-size",
            Mean,
            "B",
            28.0,
            "systemruntime_loh_size_bytes",
            "28",
        ),
        (
            rt,
            "alloc-rate",
            Sum,
            "B",
            8168.0,
            "systemruntime_alloc_rate_bytes",
            "8168",
        ),
        (
            rt,
            "time-in-gc",
            Mean,
            "%",
            0.0,
            "systemruntime_time_in_gc_ratio",
            "0",
        ),
        (
            rt,
            "gc-fragmentation",
            Mean,
            "%",
            1.25,
            "systemruntime_gc_fragmentation_ratio",
            "1.25",
        ),
        (
            rt,
            "gen-0-gc-count",
            Sum,
            "count",
            1.0,
            "systemruntime_gen_0_gc_count",
            "1",
        ),
        (
            rt,
            "gen-1-gc-count",
            Sum,
            "count",
            0.0,
            "systemruntime_gen_1_gc_count",
            "0",
        ),
        (
            rt,
            "gen-2-gc-count",
            Sum,
            "",
            0.0,
            "systemruntime_gen_2_gc_count",
            "0",
        ),
    ];
    let mut st = Store::default();
    for (provider, name, kind, unit, value, _, _) in cases {
        st.record(7, &with_unit(sample(provider, name, kind, value), unit));
    }
    let text = st.render();
    for (_, _, _, _, _, metric, value) in cases {
        assert!(
            text.contains(&format!(
                "# TYPE {} gauge\n{}{{pid=\"7\"}} {}\n",
                metric, metric, value
            )),
            "{}:\n{}",
            metric,
            text
        );
    }
    assert!(!text.contains("_total"), "{}", text);
    assert!(text.contains(
        "# HELP systemruntime_working_set_bytes System.Runtime working-set (MB, in bytes)\n"
    ));
}

#[test]
fn prometheus_exposition_groups_families_and_holds_last_interval() {
    let mut st = Store::default();
    let rate = |v| {
        with_unit(
            sample("MyMeter", "requests", CounterKind::Rate, v),
            "requests",
        )
    };
    st.record(2, &rate(50.0));
    st.record(1, &rate(10.0));
    st.record(2, &rate(49.0));
    let mut g = with_unit(
        sample("System.Runtime", "cpu-usage", CounterKind::Mean, 3.5),
        "%",
    );
    g.tags = vec![("pid".into(), "x\"y".into())];
    st.record(1, &g);
    let text = st.render();
    assert_eq!(
        text,
        "# HELP mymeter_requests_requests MyMeter requests (requests)\n\
         # TYPE mymeter_requests_requests gauge\n\
         mymeter_requests_requests{pid=\"1\"} 10\n\
         mymeter_requests_requests{pid=\"2\"} 49\n\
         # HELP systemruntime_cpu_usage_ratio System.Runtime cpu-usage (%)\n\
         # TYPE systemruntime_cpu_usage_ratio gauge\n\
         systemruntime_cpu_usage_ratio{pid=\"1\",tag_pid=\"x\\\"y\"} 3.5\n"
    );
    let mut h = with_unit(
        sample("M", "latency", CounterKind::Percentile(0.95), 0.5),
        "MB",
    );
    h.tags = vec![("route".into(), "/a".into())];
    st.record(1, &h);
    assert!(st.render().contains(
        "# TYPE m_latency_bytes summary\n\
         m_latency_bytes{pid=\"1\",route=\"/a\",quantile=\"0.95\"} 500000\n"
    ));
    st.remove(2);
    assert!(!st.render().contains("pid=\"2\""));
    assert_eq!(st.series_count(), 3);
}
