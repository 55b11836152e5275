//! What dotnet-monitor names the artifacts it egresses, checked.

/// Whether `name` is dotnet-monitor's artifact name `{yyyyMMdd_HHmmss_fff}_{pid}.{ext}`.
pub fn is_artifact_name(name: &str, pid: u32, ext: &str) -> bool {
    let rest = format!("_{}.{}", pid, ext);
    let stamp = match name.strip_suffix(&rest) {
        Some(s) => s.as_bytes(),
        None => return false,
    };
    stamp.len() == 19
        && stamp.iter().enumerate().all(|(i, &c)| {
            if i == 8 || i == 15 {
                c == b'_'
            } else {
                c.is_ascii_digit()
            }
        })
}

#[cfg(test)]
mod tests {
    use super::is_artifact_name;

    #[test]
    fn artifact_names_are_dotnet_monitors() {
        assert!(is_artifact_name(
            "20261129_093000_123_42.nettrace",
            42,
            "nettrace"
        ));
        assert!(!is_artifact_name(
            "20261129_093000_123_43.nettrace",
            42,
            "nettrace"
        ));
        assert!(!is_artifact_name(
            "20261129-093000_123_42.nettrace",
            42,
            "nettrace"
        ));
        assert!(!is_artifact_name(
            "2026112_093000_123_42.nettrace",
            42,
            "nettrace"
        ));
        assert!(!is_artifact_name(
            "20261129_093000_123_42.gcdump",
            42,
            "nettrace"
        ));
    }
}
