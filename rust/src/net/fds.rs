//! The process's table of file descriptors, grown once when an engine starts rather than while it
//! serves.
//!
//! Linux keeps a process's descriptors in one table, which it grows by doubling (128, 256, 512,
//! ... entries) when a new descriptor does not fit, and never shrinks. In a process of several
//! threads (every engine's: a runtime's threads beside Python's), growing it waits for an RCU grace
//! period (`expand_fdtable` calls `synchronize_rcu`), and the thread that opened the descriptor
//! (an `accept`, a `socket`) sleeps in the kernel meanwhile: a sched trace of the native
//! synthetic server caught its thread there for 12 and 18 ms while 1,024 streams opened, and
//! every token due meanwhile went out late. So each engine grows the table to what it may use
//! when it starts, while nothing waits on it.

/// The most descriptors [`reserve`] makes room for: 65,536 take 512 KiB of the kernel's memory.
pub const MOST: u64 = 65_536;

/// Grows this process's descriptor table to hold `wanted` descriptors, or as many as its
/// `RLIMIT_NOFILE` soft limit allows if fewer (and at most [`MOST`]). Returns the table's size
/// now known to be reached (0 where nothing was done: not Linux, or the descriptor could not be
/// made). Cheap once the table is that large.
pub fn reserve(wanted: u64) -> u64 {
    #[cfg(target_os = "linux")]
    {
        reserve_linux(wanted)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = wanted;
        0
    }
}

#[cfg(target_os = "linux")]
fn reserve_linux(wanted: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    let size = wanted.min(limit.rlim_cur).min(MOST);
    if size < 2 {
        return 0;
    }
    // A descriptor numbered `size - 1` needs a table of `size` entries: duplicating one there
    // (the lowest free number at or above it) grows the table, and closing it leaves the table
    // grown. The descriptor duplicated is an eventfd of our own, which nothing else sees.
    // SAFETY: plain system calls on descriptors this function opens and closes itself.
    unsafe {
        let fd = libc::eventfd(0, libc::EFD_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, (size - 1) as libc::c_int);
        libc::close(fd);
        if high < 0 {
            return 0;
        }
        libc::close(high);
    }
    size
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The table's size, from /proc (the `FDSize` line of the process's status).
    fn table_size() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("FDSize:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn the_table_is_grown_and_stays_grown() {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        let wanted = 3000.min(limit.rlim_cur);
        assert_eq!(reserve(wanted), wanted);
        assert!(table_size() >= wanted, "FDSize {}", table_size());
        // Capped at the soft limit and at MOST.
        assert_eq!(reserve(u64::MAX), limit.rlim_cur.min(MOST));
        assert!(table_size() >= limit.rlim_cur.min(MOST));
        // Nothing is left open: the next descriptor is a low one.
        let file = std::fs::File::open("/proc/self/status").unwrap();
        use std::os::fd::AsRawFd;
        assert!((file.as_raw_fd() as u64) < wanted);
        assert_eq!(reserve(1), 0);
    }
}
