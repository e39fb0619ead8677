//! How the Dimemas model decodes its trace for [`crate::source::Source`]: one
//! [`TaskCursor`] per task over the one `.dim` file (positioned reads into
//! one shared scratch buffer, no read buffer per task), giving the records,
//! offsets and errors [`TaskStream`](benchlake_formats::dimemas::TaskStream)
//! gives.
use std::fs::File;
use std::path::PathBuf;

use benchlake_formats::FormatError;
use benchlake_formats::dimemas::{DimRecord, DimTrace, TaskCursor};

use crate::error::Result;

/// A record with the byte offset of its line.
pub(crate) type Rec = (DimRecord, u64);

/// The tasks of one `.dim` trace.
pub(crate) struct DimDecoder {
    path: PathBuf,
    file: File,
    scratch: Vec<u8>,
    cursors: Vec<TaskCursor>,
}

impl DimDecoder {
    pub(crate) fn open(trace: &DimTrace) -> Result<Self> {
        let file = File::open(trace.path()).map_err(|e| FormatError::io(trace.path(), e))?;
        let cursors = (0..trace.ntasks() as u32)
            .map(|t| trace.task_cursor(t))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Self {
            path: trace.path().to_path_buf(),
            file,
            scratch: Vec::new(),
            cursors,
        })
    }
}

impl crate::source::Decode for DimDecoder {
    type Rec = Rec;
    /// One `.dim` file read at offsets: its tasks stay on the decoding
    /// thread (the loop is the bound).
    type Task = ();

    fn ntasks(&self) -> usize {
        self.cursors.len()
    }

    fn fill(
        &mut self,
        t: usize,
        out: &mut Vec<Rec>,
        max: usize,
    ) -> std::result::Result<(), FormatError> {
        match self.cursors.get_mut(t) {
            Some(c) => c.fill(&self.path, &self.file, &mut self.scratch, out, max),
            None => Ok(()),
        }
    }

    fn is_done(&self, t: usize) -> bool {
        self.cursors.get(t).is_none_or(TaskCursor::is_done)
    }
}
