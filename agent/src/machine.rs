//! What the machine offers: detected cores and memory, operator overrides
//! (`--resources cpus=16,mem_mib=65536,...`) and placement attributes (`--attributes rack=r1`).

use std::collections::BTreeMap;
use std::path::Path;

use fullerene_proto::resources::{ResourceKind, ResourceVec};

/// A bad `--resources` or `--attributes` value, naming the entry.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MachineError {
    /// An entry without `=`.
    #[error("`{entry}` is not KEY=VALUE")]
    NotKeyValue {
        /// The entry as given.
        entry: String,
    },
    /// A resource name Fullerene does not schedule.
    #[error("unknown resource `{key}` (known: cpus, mem_mib, disk_mbps, net_mbps, gpus)")]
    UnknownResource {
        /// The name as given.
        key: String,
    },
    /// An amount that is not a finite number ≥ 0.
    #[error("resource `{key}` has value `{value}`, which is not a finite number >= 0")]
    BadAmount {
        /// The resource.
        key: String,
        /// The value as given.
        value: String,
    },
    /// The same key twice.
    #[error("`{key}` is given twice")]
    Duplicate {
        /// The key.
        key: String,
    },
    /// An attribute with an empty key.
    #[error("attribute `{entry}` has an empty name")]
    EmptyAttribute {
        /// The entry as given.
        entry: String,
    },
}

/// The machine's cores (what this process may use) and memory (`MemTotal`), the rest zero.
pub fn detect() -> ResourceVec {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0);
    let mem_mib = std::fs::read_to_string(Path::new("/proc/meminfo"))
        .ok()
        .and_then(|text| mem_total_mib(&text))
        .unwrap_or(0.0);
    ResourceVec::from_pairs(&[(ResourceKind::Cpus, cpus), (ResourceKind::MemMib, mem_mib)])
}

/// `MemTotal` from `/proc/meminfo` text, in MiB.
pub fn mem_total_mib(meminfo: &str) -> Option<f64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line.split_whitespace().skip(1);
    let amount: f64 = words.next()?.parse().ok()?;
    let unit = words.next().unwrap_or("kB");
    let kib = match unit {
        "kB" | "KB" | "kb" => amount,
        "mB" | "MB" => amount * 1024.0,
        _ => return None,
    };
    Some((kib / 1024.0).floor())
}

/// Parses `cpus=16,mem_mib=65536,...`: the resources named, each a finite amount ≥ 0.
pub fn parse_resources(text: &str) -> Result<Vec<(ResourceKind, f64)>, MachineError> {
    let mut out: Vec<(ResourceKind, f64)> = Vec::new();
    for (key, value) in key_values(text)? {
        let kind = ResourceKind::from_name(&key)
            .ok_or_else(|| MachineError::UnknownResource { key: key.clone() })?;
        let amount: f64 = value
            .parse()
            .ok()
            .filter(|a: &f64| a.is_finite() && *a >= 0.0)
            .ok_or_else(|| MachineError::BadAmount {
                key: key.clone(),
                value: value.clone(),
            })?;
        if out.iter().any(|(k, _)| *k == kind) {
            return Err(MachineError::Duplicate { key });
        }
        out.push((kind, amount));
    }
    Ok(out)
}

/// `detected` with the named resources replaced by the operator's values.
pub fn with_overrides(detected: ResourceVec, overrides: &[(ResourceKind, f64)]) -> ResourceVec {
    let mut total = detected;
    for &(kind, amount) in overrides {
        total[kind] = amount;
    }
    total
}

/// Parses `rack=r1,zone=z1`.
pub fn parse_attributes(text: &str) -> Result<BTreeMap<String, String>, MachineError> {
    let mut out = BTreeMap::new();
    for (key, value) in key_values(text)? {
        if key.is_empty() {
            return Err(MachineError::EmptyAttribute {
                entry: format!("={value}"),
            });
        }
        if out.insert(key.clone(), value).is_some() {
            return Err(MachineError::Duplicate { key });
        }
    }
    Ok(out)
}

fn key_values(text: &str) -> Result<Vec<(String, String)>, MachineError> {
    text.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let (k, v) = entry
                .split_once('=')
                .ok_or_else(|| MachineError::NotKeyValue {
                    entry: entry.to_string(),
                })?;
            Ok((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// This machine's host name (`/proc/sys/kernel/hostname`), or `localhost` when unknown.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_total_is_read_in_mib() {
        let text = "MemTotal:       24684092 kB\nMemFree:         1000 kB\n";
        assert_eq!(mem_total_mib(text), Some(24105.0));
        assert_eq!(mem_total_mib("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn detection_finds_cores_and_memory() {
        let detected = detect();
        assert!(detected[ResourceKind::Cpus] >= 1.0);
        assert!(detected[ResourceKind::MemMib] > 0.0, "{detected}");
    }

    #[test]
    fn overrides_replace_only_what_they_name() {
        let detected =
            ResourceVec::from_pairs(&[(ResourceKind::Cpus, 2.0), (ResourceKind::MemMib, 1000.0)]);
        let overrides = parse_resources("cpus=16, disk_mbps=1000,gpus=0").expect("parses");
        let total = with_overrides(detected, &overrides);
        assert_eq!(total[ResourceKind::Cpus], 16.0);
        assert_eq!(total[ResourceKind::MemMib], 1000.0);
        assert_eq!(total[ResourceKind::DiskMbps], 1000.0);
    }

    #[test]
    fn bad_resources_name_the_entry() {
        let cases = [
            ("cpus", "`cpus` is not KEY=VALUE"),
            ("cpu=4", "unknown resource `cpu`"),
            ("mem_mib=lots", "`mem_mib` has value `lots`"),
            ("gpus=-1", "`gpus` has value `-1`"),
            ("cpus=inf", "`cpus` has value `inf`"),
            ("cpus=1,cpus=2", "`cpus` is given twice"),
        ];
        for (text, expected) in cases {
            let error = parse_resources(text).expect_err(text).to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn attributes_parse_and_bad_ones_are_named() {
        let attrs = parse_attributes("rack=r1,zone=z1").expect("parses");
        assert_eq!(attrs.get("rack").map(String::as_str), Some("r1"));
        assert_eq!(attrs.len(), 2);
        assert!(parse_attributes("").expect("empty").is_empty());
        assert!(parse_attributes("rack").is_err());
        assert!(parse_attributes("=r1").is_err());
        assert!(parse_attributes("rack=1,rack=2").is_err());
    }
}
