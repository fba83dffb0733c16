//! Kubernetes resource quantities ("100m", "64Mi", "1.5", "1e3") of `[node]` keys and of Pod specs: parsed for checks and limits, printed canonically.

/// The value of quantity `s` (cores for cpu, bytes for memory), or `None` when it is not a
/// valid Kubernetes quantity.
pub fn parse(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    if number.is_empty() || number == "+" || number == "-" || number.matches('.').count() > 1 {
        return None;
    }
    let n: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0_f64.powi(2),
        "Gi" => 1024.0_f64.powi(3),
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        "Ei" => 1024.0_f64.powi(6),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().ok()?;
            10f64.powi(exp)
        }
        _ => return None,
    };
    let v = n * scale;
    v.is_finite().then_some(v)
}

/// `bytes` the way a Kubernetes BinarySI quantity prints (`100Mi`, `52335Ki`, `1234`): the
/// largest power-of-1024 suffix that divides it exactly.
pub fn format_binary(bytes: i64) -> String {
    const SUFFIXES: [&str; 6] = ["Ei", "Pi", "Ti", "Gi", "Mi", "Ki"];
    if bytes == 0 {
        return "0".to_string();
    }
    for (i, s) in SUFFIXES.iter().enumerate() {
        let unit = 1i64 << (10 * (6 - i));
        if bytes % unit == 0 {
            return format!("{}{s}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// `n` the way a Kubernetes DecimalSI quantity prints (`1k`, `1500`, `2M`).
pub fn format_decimal(n: i64) -> String {
    const SUFFIXES: [(&str, i64); 6] = [
        ("E", 1_000_000_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("T", 1_000_000_000_000),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("k", 1_000),
    ];
    if n == 0 {
        return "0".to_string();
    }
    for (s, unit) in SUFFIXES {
        if n % unit == 0 {
            return format!("{}{s}", n / unit);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::{format_binary, format_decimal, parse};

    #[test]
    fn canonical_forms() {
        assert_eq!(format_binary(100 << 20), "100Mi");
        assert_eq!(format_binary(53_591_040), "52335Ki");
        assert_eq!(format_binary(1234), "1234");
        assert_eq!(format_binary(0), "0");
        assert_eq!(format_binary(3 << 30), "3Gi");
        assert_eq!(format_decimal(1000), "1k");
        assert_eq!(format_decimal(1500), "1500");
        assert_eq!(format_decimal(2_000_000), "2M");
    }

    #[test]
    fn suffixes() {
        assert_eq!(parse("100m"), Some(0.1));
        assert_eq!(parse("2"), Some(2.0));
        assert_eq!(parse("1.5"), Some(1.5));
        assert_eq!(parse("64Mi"), Some(64.0 * 1024.0 * 1024.0));
        assert_eq!(parse("1G"), Some(1e9));
        assert_eq!(parse("1e3"), Some(1000.0));
        assert_eq!(parse("1E-3"), Some(0.001));
        assert_eq!(parse("+5k"), Some(5000.0));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "m", "1.2.3", "12Q", "1mi", "ten", "1 Gi", "-", "1e"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
