//! Model files: the weights with what produced them, and training checkpoints (the same, with
//! the optimiser's state), in a versioned, checksummed format. A file that is missing,
//! truncated, corrupt, of another format version or of another network shape is refused with
//! an error naming it.
//!
//! Layout: the magic `FULLDCMA`, the format version (u32, little-endian), the payload's length
//! (u64), the payload (bincode), and the payload's SHA-256.

use std::path::{Path, PathBuf};

use candle_core::Tensor;
use ring::digest;
use serde::{Deserialize, Serialize};

use crate::model::DecimaModel;

const MAGIC: &[u8; 8] = b"FULLDCMA";
/// The format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;
const HEADER: usize = MAGIC.len() + 4 + 8;
const CHECKSUM: usize = 32;
/// The largest payload read: a model is tens of kilobytes; a length field beyond this is
/// damage (and the decoder allocates what lengths inside the payload say, so it is bounded).
const MAX_PAYLOAD: usize = 64 << 20;

fn codec() -> bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<MAX_PAYLOAD>,
> {
    bincode::config::standard().with_limit::<MAX_PAYLOAD>()
}

/// What produced a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The command line that trained it.
    pub command: String,
    /// The training seed.
    pub seed: u64,
    /// Training iterations done.
    pub iterations: u64,
    /// The workload it trained on (file name).
    pub workload: String,
    /// Executors of its training setting.
    pub executors: usize,
    /// Seconds of training.
    pub training_s: f64,
}

/// One named tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredTensor {
    /// The parameter's name ([`DecimaModel::parameters`]).
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its values, row-major.
    pub values: Vec<f32>,
}

/// Adam's state, to resume training where it stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OptimiserState {
    /// Steps taken.
    pub steps: u64,
    /// First moments, one per parameter in order.
    pub first: Vec<StoredTensor>,
    /// Second moments.
    pub second: Vec<StoredTensor>,
}

/// A file's contents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    /// What produced the weights.
    pub provenance: Provenance,
    /// The weights.
    pub weights: Vec<StoredTensor>,
    /// For a checkpoint: the optimiser's state and the running average reward per second.
    pub optimiser: Option<(OptimiserState, f64)>,
}

/// Why a model file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ModelFileError {
    /// Reading or writing failed.
    #[error("model file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not a Fullerene model file at all.
    #[error("{path} is not a Fullerene Decima model file (no `FULLDCMA` header)")]
    NotAModel {
        /// The file.
        path: PathBuf,
    },
    /// Written by another format version.
    #[error("model file {path} has format version {found}; this build reads version {FORMAT_VERSION} (retrain with `fullerene learn train`)")]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u32,
    },
    /// Shorter than its header says.
    #[error("model file {path} is truncated: {found} bytes where {expected} were written")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes present.
        found: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// Its contents do not match their checksum.
    #[error("model file {path} is corrupt: its checksum does not match its contents")]
    Checksum {
        /// The file.
        path: PathBuf,
    },
    /// The payload does not decode.
    #[error("model file {path} does not decode: {reason}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// The decoder's message.
        reason: String,
    },
    /// Weights for another network.
    #[error("model file {path} does not fit this network: {reason}")]
    Shape {
        /// The file.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// The tensor library failed.
    #[error("model file {path}: {source}")]
    Tensor {
        /// The file.
        path: PathBuf,
        /// Its error.
        source: candle_core::Error,
    },
}

impl ModelFile {
    /// Writes the file, through a temporary file beside it so that a crash or a full disk
    /// never leaves half a model behind.
    pub fn save(&self, path: &Path) -> Result<(), ModelFileError> {
        let io = |source| ModelFileError::Io {
            path: path.to_path_buf(),
            source,
        };
        let payload =
            bincode::serde::encode_to_vec(self, codec()).map_err(|e| ModelFileError::Decode {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        let mut bytes = Vec::with_capacity(HEADER + payload.len() + CHECKSUM);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&payload);
        bytes.extend_from_slice(digest::digest(&digest::SHA256, &payload).as_ref());
        let mut name = path.as_os_str().to_owned();
        name.push(".tmp");
        let tmp = PathBuf::from(name);
        let mut file = std::fs::File::create(&tmp).map_err(io)?;
        std::io::Write::write_all(&mut file, &bytes).map_err(io)?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Reads and checks a file.
    pub fn load(path: &Path) -> Result<ModelFile, ModelFileError> {
        let bytes = std::fs::read(path).map_err(|source| ModelFileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        ModelFile::from_bytes(&bytes, path)
    }

    /// Decodes a file's bytes (`path` names it in errors).
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<ModelFile, ModelFileError> {
        let path = || path.to_path_buf();
        if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            return Err(ModelFileError::NotAModel { path: path() });
        }
        if bytes.len() < HEADER {
            return Err(ModelFileError::Truncated {
                path: path(),
                found: bytes.len(),
                expected: HEADER,
            });
        }
        let mut word = [0; 4];
        word.copy_from_slice(&bytes[8..12]);
        let version = u32::from_le_bytes(word);
        if version != FORMAT_VERSION {
            return Err(ModelFileError::Version {
                path: path(),
                found: version,
            });
        }
        let mut long = [0; 8];
        long.copy_from_slice(&bytes[12..20]);
        let length = usize::try_from(u64::from_le_bytes(long)).unwrap_or(usize::MAX);
        if length > MAX_PAYLOAD {
            return Err(ModelFileError::Decode {
                path: path(),
                reason: format!("its payload claims {length} bytes, more than a model holds"),
            });
        }
        let expected = HEADER.saturating_add(length).saturating_add(CHECKSUM);
        if bytes.len() != expected {
            return Err(ModelFileError::Truncated {
                path: path(),
                found: bytes.len(),
                expected,
            });
        }
        let payload = &bytes[HEADER..HEADER + length];
        if digest::digest(&digest::SHA256, payload).as_ref() != &bytes[HEADER + length..] {
            return Err(ModelFileError::Checksum { path: path() });
        }
        let (file, _) = bincode::serde::decode_from_slice::<ModelFile, _>(payload, codec())
            .map_err(|e| ModelFileError::Decode {
                path: path(),
                reason: e.to_string(),
            })?;
        Ok(file)
    }

    /// The weights of `model`, with `provenance`.
    pub fn of_model(
        model: &DecimaModel,
        provenance: Provenance,
    ) -> Result<ModelFile, candle_core::Error> {
        Ok(ModelFile {
            provenance,
            weights: store(
                model
                    .parameters()
                    .iter()
                    .map(|(n, v)| (n.clone(), v.as_tensor())),
            )?,
            optimiser: None,
        })
    }

    /// A model with these weights; `path` names the file in errors.
    pub fn model(&self, path: &Path) -> Result<DecimaModel, ModelFileError> {
        let model = DecimaModel::new(0).map_err(|source| ModelFileError::Tensor {
            path: path.to_path_buf(),
            source,
        })?;
        let parameters = model.parameters();
        if parameters.len() != self.weights.len() {
            return Err(ModelFileError::Shape {
                path: path.to_path_buf(),
                reason: format!(
                    "{} tensors where the network has {}",
                    self.weights.len(),
                    parameters.len()
                ),
            });
        }
        for ((name, var), stored) in parameters.iter().zip(&self.weights) {
            let tensor = restore(stored, var.dims(), name, path)?;
            var.set(&tensor).map_err(|source| ModelFileError::Tensor {
                path: path.to_path_buf(),
                source,
            })?;
        }
        Ok(model)
    }
}

/// Named tensors as stored values.
pub fn store<'a>(
    tensors: impl Iterator<Item = (String, &'a Tensor)>,
) -> Result<Vec<StoredTensor>, candle_core::Error> {
    tensors
        .map(|(name, tensor)| {
            Ok(StoredTensor {
                name,
                shape: tensor.dims().to_vec(),
                values: tensor.flatten_all()?.to_vec1::<f32>()?,
            })
        })
        .collect()
}

/// A stored tensor back, checked against the name and shape the network expects.
pub fn restore(
    stored: &StoredTensor,
    dims: &[usize],
    name: &str,
    path: &Path,
) -> Result<Tensor, ModelFileError> {
    if stored.name != name
        || stored.shape != dims
        || stored.values.len() != dims.iter().product::<usize>()
    {
        return Err(ModelFileError::Shape {
            path: path.to_path_buf(),
            reason: format!(
                "expected `{name}` of shape {dims:?}, found `{}` of shape {:?} with {} values",
                stored.name,
                stored.shape,
                stored.values.len()
            ),
        });
    }
    if let Some(bad) = stored.values.iter().find(|v| !v.is_finite()) {
        return Err(ModelFileError::Shape {
            path: path.to_path_buf(),
            reason: format!("`{name}` holds {bad}: the weights diverged"),
        });
    }
    Tensor::from_vec(stored.values.clone(), dims, &candle_core::Device::Cpu).map_err(|source| {
        ModelFileError::Tensor {
            path: path.to_path_buf(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance() -> Provenance {
        Provenance {
            command: "fullerene learn train --iterations 3".into(),
            seed: 4,
            iterations: 3,
            workload: "tpch-decima.jsonl".into(),
            executors: 50,
            training_s: 1.5,
        }
    }

    fn saved(dir: &Path) -> (PathBuf, DecimaModel) {
        let model = DecimaModel::new(9).unwrap();
        let path = dir.join("m.model");
        ModelFile::of_model(&model, provenance())
            .unwrap()
            .save(&path)
            .unwrap();
        (path, model)
    }

    fn first_weights(model: &DecimaModel) -> Vec<f32> {
        model.parameters()[0]
            .1
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    #[test]
    fn a_saved_model_loads_with_the_same_weights_and_provenance() {
        let dir = tempfile::tempdir().unwrap();
        let (path, model) = saved(dir.path());
        let file = ModelFile::load(&path).unwrap();
        assert_eq!(file.provenance, provenance());
        let loaded = file.model(&path).unwrap();
        assert_eq!(first_weights(&loaded), first_weights(&model));
        assert!(!dir.path().join("m.model.tmp").exists());
    }

    #[test]
    fn damaged_files_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = saved(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let load = |bytes: &[u8]| ModelFile::from_bytes(bytes, &path).unwrap_err();
        let mut flipped = bytes.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 1;
        assert!(matches!(load(&flipped), ModelFileError::Checksum { .. }));
        assert!(matches!(
            load(&bytes[..bytes.len() - 1]),
            ModelFileError::Truncated { .. }
        ));
        assert!(matches!(
            load(b"{\"weights\": []}"),
            ModelFileError::NotAModel { .. }
        ));
        let mut other_version = bytes.clone();
        other_version[8] = 99;
        let err = load(&other_version);
        assert!(matches!(err, ModelFileError::Version { found: 99, .. }));
        assert!(err.to_string().contains("m.model"), "{err}");
        let missing = ModelFile::load(&dir.path().join("nope.model")).unwrap_err();
        assert!(matches!(missing, ModelFileError::Io { .. }));
        assert!(missing.to_string().contains("nope.model"), "{missing}");
    }

    #[test]
    fn weights_that_are_not_numbers_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = saved(dir.path());
        let mut file = ModelFile::load(&path).unwrap();
        file.weights[3].values[0] = f32::NAN;
        let err = file.model(&path).unwrap_err();
        assert!(err.to_string().contains("diverged"), "{err}");
    }

    #[test]
    fn weights_of_another_network_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = saved(dir.path());
        let mut file = ModelFile::load(&path).unwrap();
        file.weights[0].shape = vec![1, 1];
        file.weights[0].values = vec![0.0];
        assert!(matches!(
            file.model(&path),
            Err(ModelFileError::Shape { .. })
        ));
        file.weights.pop();
        assert!(matches!(
            file.model(&path),
            Err(ModelFileError::Shape { .. })
        ));
    }
}
