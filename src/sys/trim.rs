//! Giving memory back: freed heap, and the clean file pages startup or a burst of work touched.

/// What a shed did: the process's `RssFile` (file pages mapped) just before and just after it,
/// in KiB, when `/proc/self/status` could be read. Pages faulted back in afterwards (by the next
/// call, or by the kernel mapping a whole large folio on one fault) are not its doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shed {
    pub file_kib_before: Option<u64>,
    pub file_kib_after: Option<u64>,
}

/// Returns freed heap to the kernel and unmaps the clean file pages touched so far (startup's
/// runtime init, argument parsing, runc spawn, JSON; a daemon's burst of calls): they stay in
/// the page cache and fault back in if used again. Only private file mappings without a single
/// anonymous (copied-on-write) page are dropped, so what they read back is exactly what was
/// there; relocated data (RELRO, `.data`) always has anonymous pages and is never touched.
pub fn shed_startup_pages() {
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return;
    };
    for (start, end) in clean_file_mappings(&smaps) {
        // SAFETY: the range is a private, read-only file mapping with no anonymous page:
        // MADV_DONTNEED only drops page-table entries, and every later access reads the same
        // bytes from the file again. No Rust reference can observe a difference.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

/// [`shed_startup_pages`], with `RssFile` read just before and just after (the daemon's idle
/// shed logs both; a monitor's start path skips the two reads).
pub fn shed_measured() -> Shed {
    let file_kib_before = rss_file_kib();
    shed_startup_pages();
    Shed {
        file_kib_before,
        file_kib_after: rss_file_kib(),
    }
}

/// `RssFile` of this process in KiB.
fn rss_file_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_rss_file_kib(&status)
}

/// `RssFile` in KiB from a `/proc/<pid>/status` text.
pub fn parse_rss_file_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssFile:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// `(start, end)` of the read-only, private, file-backed mappings with `Anonymous: 0 kB`.
fn clean_file_mappings(smaps: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some((start, end)) = first.split_once('-') {
            let perms = fields.next().unwrap_or("");
            let path = fields.nth(3).unwrap_or("");
            current = match (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) {
                (Ok(s), Ok(e))
                    if perms.starts_with('r')
                        && perms.ends_with('p')
                        && !perms.contains('w')
                        && path.starts_with('/') =>
                {
                    Some((s, e))
                }
                _ => None,
            };
        } else if first == "Anonymous:" {
            if let Some(range) = current.take() {
                if fields.next() == Some("0") {
                    out.push(range);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_clean_read_only_private_file_mappings_are_chosen() {
        let smaps = "\
55d3e2288000-55d3e296a000 r--p 00000000 fe:00 5313341  /usr/bin/bosun
Rss:                 576 kB
Anonymous:             0 kB
55d3e296a000-55d3e3a8e000 r-xp 006e1000 fe:00 5313341  /usr/bin/bosun
Anonymous:             0 kB
55d3e3a8e000-55d3e3baf000 r--p 01804000 fe:00 5313341  /usr/bin/bosun
Anonymous:          1156 kB
55d3e3baf000-55d3e3bb4000 rw-p 01924000 fe:00 5313341  /usr/bin/bosun
Anonymous:             0 kB
7f0000000000-7f0000001000 r--s 00000000 fe:00 1  /dev/shm/x
Anonymous:             0 kB
7ffd40e8a000-7ffd40eab000 rw-p 00000000 00:00 0  [stack]
Anonymous:            20 kB
7ffd40eb0000-7ffd40eb2000 r-xp 00000000 00:00 0  [vdso]
Anonymous:             0 kB
";
        assert_eq!(
            clean_file_mappings(smaps),
            vec![
                (0x55d3e2288000, 0x55d3e296a000),
                (0x55d3e296a000, 0x55d3e3a8e000)
            ]
        );
    }

    #[test]
    fn shedding_keeps_the_process_working() {
        let before = format!("{:?}", vec![1, 2, 3]);
        let shed = shed_measured();
        assert_eq!(format!("{:?}", vec![1, 2, 3]), before);
        let (Some(b), Some(a)) = (shed.file_kib_before, shed.file_kib_after) else {
            panic!("RssFile unread: {shed:?}");
        };
        assert!(a < b, "nothing unmapped: {shed:?}");
    }

    #[test]
    fn rss_file_is_read_from_status() {
        let status =
            "Name:\tbosun\nRssAnon:\t    1200 kB\nRssFile:\t    8404 kB\nRssShmem:\t       0 kB\n";
        assert_eq!(parse_rss_file_kib(status), Some(8404));
        assert_eq!(parse_rss_file_kib("Name:\tx\n"), None);
    }
}
