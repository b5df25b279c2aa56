//! The guest's allocator: a bump arena in front of the standard one (the
//! default `arena` feature; WebAssembly builds only).
//!
//! Most instances live for one call (the host's `fresh` policy), and for
//! them the cheapest allocator is one that never frees and never grows the
//! linear memory: the standard one (dlmalloc) asks for memory with
//! `memory.grow` on its first allocation, and every growth is a change of
//! page protection in the host's process. The arena is 1 MiB of zeroed
//! static memory, part of the module's initial memory (no bytes in the
//! module, no growth): an allocation moves a pointer, freeing the last
//! allocation (or growing it, as a `String` or `Vec` does) moves it back.
//! Once the arena is spent — a pooled instance after a few calls, or a
//! large call — the standard allocator serves the rest, so memory is
//! bounded as before. Turn it off with `default-features = false` to use
//! your own `#[global_allocator]`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

const SIZE: usize = 1 << 20;

#[repr(C, align(16))]
struct Region(UnsafeCell<[u8; SIZE]>);

/// A bump arena of 1 MiB in front of [`System`].
pub struct Arena {
    region: Region,
    /// Offset of the first free byte.
    next: AtomicUsize,
}

// SAFETY: the region is only handed out in disjoint pieces, claimed with
// compare-and-swap on `next`.
unsafe impl Sync for Arena {}

impl Arena {
    /// An empty arena.
    #[allow(clippy::new_without_default, reason = "a const for the static")]
    pub const fn new() -> Arena {
        Arena { region: Region(UnsafeCell::new([0; SIZE])), next: AtomicUsize::new(0) }
    }

    fn base(&self) -> usize {
        self.region.0.get() as usize
    }

    /// The offset of `ptr` in the region, if it is there.
    fn offset(&self, ptr: *mut u8) -> Option<usize> {
        let off = (ptr as usize).wrapping_sub(self.base());
        (off < SIZE).then_some(off)
    }
}

// SAFETY: every piece handed out lies inside the region, is aligned as
// asked, and is never handed out twice while live: `next` only moves back
// over the last piece when that piece is freed or resized.
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let base = self.base();
        let mut current = self.next.load(Ordering::Relaxed);
        loop {
            let start = (base + current).next_multiple_of(layout.align()) - base;
            let Some(end) = start.checked_add(layout.size()).filter(|&e| e <= SIZE) else {
                // SAFETY: forwarded as received.
                return unsafe { System.alloc(layout) };
            };
            match self.next.compare_exchange_weak(current, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return (base + start) as *mut u8,
                Err(now) => current = now,
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match self.offset(ptr) {
            // The last piece: give it back. Any other is left until the
            // instance goes.
            Some(start) => {
                let _ = self.next.compare_exchange(start + layout.size(), start, Ordering::Relaxed, Ordering::Relaxed);
            }
            // SAFETY: it came from `System`.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(start) = self.offset(ptr) else {
            // SAFETY: it came from `System`.
            return unsafe { System.realloc(ptr, layout, new_size) };
        };
        // The last piece grows or shrinks in place.
        if let Some(end) = start.checked_add(new_size).filter(|&e| e <= SIZE)
            && self.next.compare_exchange(start + layout.size(), end, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            return ptr;
        }
        if new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: `new_size` is non-zero and, rounded to the alignment, does
        // not overflow (the contract of `realloc`).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as `alloc`; the copy is within both pieces.
        unsafe {
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size());
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn pieces_should_be_aligned_disjoint_and_inside() {
        static A: Arena = Arena::new();
        let a = &A;
        unsafe {
            let p = a.alloc(layout(3, 1));
            let q = a.alloc(layout(8, 64));
            assert_eq!(q as usize % 64, 0);
            assert!(q as usize >= p as usize + 3);
            assert!(a.offset(p).is_some() && a.offset(q).is_some());
        }
    }

    #[test]
    fn the_last_piece_should_be_freed_and_grown_in_place() {
        static A: Arena = Arena::new();
        let a = &A;
        unsafe {
            let p = a.alloc(layout(16, 8));
            p.write_bytes(7, 16);
            let grown = a.realloc(p, layout(16, 8), 4096);
            assert_eq!(grown, p, "grown in place");
            assert_eq!(*grown.add(15), 7);
            a.dealloc(grown, layout(4096, 8));
            assert_eq!(a.next.load(Ordering::Relaxed), a.offset(p).unwrap(), "given back");
        }
    }

    #[test]
    fn a_piece_not_last_should_move_when_grown() {
        static A: Arena = Arena::new();
        let a = &A;
        unsafe {
            let p = a.alloc(layout(16, 8));
            p.write_bytes(9, 16);
            let _q = a.alloc(layout(16, 8));
            let moved = a.realloc(p, layout(16, 8), 64);
            assert_ne!(moved, p);
            assert_eq!(std::slice::from_raw_parts(moved, 16), &[9; 16]);
        }
    }

    #[test]
    fn a_spent_arena_should_fall_back_to_the_system_allocator() {
        static A: Arena = Arena::new();
        let a = &A;
        unsafe {
            let big = a.alloc(layout(SIZE - 8, 8));
            assert!(a.offset(big).is_some());
            let beyond = a.alloc(layout(64, 8));
            assert!(!beyond.is_null());
            assert!(a.offset(beyond).is_none(), "from System");
            let grown = a.realloc(big, layout(SIZE - 8, 8), SIZE + 100);
            assert!(a.offset(grown).is_none(), "too large for the arena: moved to System");
            a.dealloc(grown, layout(SIZE + 100, 8));
            a.dealloc(beyond, layout(64, 8));
        }
    }
}
