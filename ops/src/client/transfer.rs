//! Moving files between this machine and a workbench: `wb add` (small files inline, large ones
//! uploaded to the store in pieces with an upload bar), saving a read file and exporting a view.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::store::{AddFiles, BlobRef, FileBytes, FileContent, Listing};
use atelier_transport::blobs::{blob_of_file, inline_budget};
use atelier_transport::{Policy, pieces};
use indicatif::{ProgressBar, ProgressStyle};

use super::{Client, coded};

/// How long `wb add` waits for the store to import files staged in the blob bucket.
const IMPORT_TIMEOUT: Duration = Duration::from_secs(900);

impl Client {
    pub async fn add(
        &self,
        workbench: &str,
        files: &[PathBuf],
        rename: Option<&str>,
    ) -> anyhow::Result<Listing> {
        if rename.is_some() && files.len() != 1 {
            bail!("--as names one file; give exactly one FILE with it");
        }
        let mut contents = Vec::with_capacity(files.len());
        let budget = inline_budget(&self.nats);
        let mut inline_bytes = 0;
        for file in files {
            let path = match rename {
                Some(name) => name.to_string(),
                None => file_name(file)?,
            };
            let size = std::fs::metadata(file)
                .with_context(|| format!("cannot read {}", file.display()))?
                .len();
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            if inline_bytes + size <= budget {
                inline_bytes += size;
                let content = std::fs::read(file)
                    .with_context(|| format!("cannot read {}", file.display()))?;
                contents.push(FileContent::inline(path, content));
                continue;
            }
            contents.push(FileContent::staged(
                path,
                self.upload(workbench, file).await?,
            ));
        }
        let add = AddFiles {
            v: PROTOCOL_VERSION,
            workbench: workbench.into(),
            files: contents,
        };
        // The store imports staged files before it answers.
        atelier_transport::request(&self.nats, &add, Policy::once(IMPORT_TIMEOUT))
            .await
            .map_err(coded)
    }

    /// Uploads a file to the workbench's store in pieces (read from disk a piece at a time,
    /// with a progress bar on a terminal) and names it by digest.
    async fn upload(&self, workbench: &str, file: &Path) -> anyhow::Result<BlobRef> {
        let blob = blob_of_file(file).await.map_err(coded)?;
        let bar = ProgressBar::new(blob.size).with_style(bytes_style());
        bar.set_message(format!("uploading {}", file.display()));
        let shown = |sent: u64| bar.set_position(sent);
        let uploaded = pieces::upload(
            &self.nats,
            workbench,
            pieces::Source::File(file),
            &blob,
            &shown,
        )
        .await;
        bar.finish_and_clear();
        uploaded.map_err(coded)?;
        Ok(blob)
    }

    /// Writes a file of `workbench` read with [`Client::cat`] to `target` (a large one fetched
    /// in pieces, digest-verified).
    pub async fn save(
        &self,
        workbench: &str,
        file: &FileBytes,
        target: &Path,
    ) -> anyhow::Result<()> {
        let Some(blob) = &file.blob else {
            return std::fs::write(target, &file.content)
                .with_context(|| format!("cannot write {}", target.display()));
        };
        pieces::fetch_to(&self.nats, Some(workbench), blob, target, false, &|_| {})
            .await
            .map_err(coded)
    }

    /// Writes every file of a view under `dir`; returns the paths written.
    pub async fn export(
        &self,
        workbench: &str,
        dir: &Path,
        draft: bool,
    ) -> anyhow::Result<Vec<PathBuf>> {
        let listing = self.ls(workbench, draft).await?;
        let mut written = Vec::new();
        for entry in listing.files {
            let target = export_target(dir, &entry.path)?;
            let file = self.cat(workbench, &entry.path, draft).await?;
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            self.save(workbench, &file, &target).await?;
            written.push(target);
        }
        Ok(written)
    }
}

/// Where `path` goes under `dir`, refusing anything that could land outside it whatever the
/// server sent: a path that is not already normalized (`..`, absolute, …) or a symbolic link on
/// the way (an attacker's `dir/reports -> /etc`).
fn export_target(dir: &Path, path: &str) -> anyhow::Result<PathBuf> {
    let safe = atelier_messages::path::normalize(path)
        .ok()
        .filter(|normal| normal == path);
    let Some(safe) = safe else {
        bail!(
            "SANDBOX_VIOLATION: the server listed the unsafe path {path:?}; nothing was written for it"
        );
    };
    let mut target = dir.to_path_buf();
    for segment in safe.split('/') {
        target.push(segment);
        let is_link = std::fs::symlink_metadata(&target)
            .map(|meta| meta.file_type().is_symlink())
            .unwrap_or(false);
        if is_link {
            bail!(
                "SANDBOX_VIOLATION: {} is a symbolic link; export into a folder without links",
                target.display()
            );
        }
    }
    Ok(target)
}

fn file_name(path: &Path) -> anyhow::Result<String> {
    path.file_name()
        .and_then(|name| name.to_str())
        .map(str::to_string)
        .with_context(|| format!("{} has no usable file name; use --as PATH", path.display()))
}

/// The upload bar: bytes sent of the file's size.
fn bytes_style() -> ProgressStyle {
    ProgressStyle::with_template("[{elapsed_precise}] {bar:24} {bytes}/{total_bytes} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_stays_inside_its_folder() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let inside = export_target(dir.path(), "reports/q3.csv").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(inside, dir.path().join("reports").join("q3.csv"));
        for unsafe_path in ["../evil", "/etc/passwd", "a/../../b", "a//b", "./a"] {
            assert!(
                export_target(dir.path(), unsafe_path).is_err(),
                "{unsafe_path}"
            );
        }
        let elsewhere = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("link"))
            .unwrap_or_else(|e| panic!("{e}"));
        let through_link = export_target(dir.path(), "link/x.txt");
        assert!(
            through_link.is_err_and(|e| e.to_string().contains("SANDBOX_VIOLATION")),
            "a link on the way is refused"
        );
    }
}
