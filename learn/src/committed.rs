//! The model trained in the repository, built into the binary so that `--policy decima`
//! works without a file. `learn/models/README.md` gives the command, seed and iterations that
//! produced it and how it fares against the heuristics.

use std::path::Path;

use crate::file::{ModelFile, ModelFileError};
use crate::model::DecimaModel;

/// The built-in model's name in errors and reports: its path in the repository.
pub const BUILT_IN_MODEL: &str = "learn/models/decima-batch.model";

static BUILT_IN_BYTES: &[u8] = include_bytes!("../models/decima-batch.model");

/// The built-in model's file (weights and provenance).
pub fn built_in_model_file() -> Result<ModelFile, ModelFileError> {
    ModelFile::from_bytes(BUILT_IN_BYTES, Path::new(BUILT_IN_MODEL))
}

/// The model in `path`, or the built-in one when there is none; errors name the file.
pub fn load_model(path: Option<&Path>) -> Result<DecimaModel, ModelFileError> {
    match path {
        Some(path) => ModelFile::load(path)?.model(path),
        None => built_in_model_file()?.model(Path::new(BUILT_IN_MODEL)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_model_loads_and_says_what_trained_it() {
        let file = built_in_model_file().expect("the committed model decodes");
        assert!(file.provenance.iterations > 0, "{:?}", file.provenance);
        assert!(file.provenance.command.contains("learn train"));
        let model = load_model(None).expect("its weights fit the network");
        assert_eq!(
            model.num_weights(),
            file.weights.iter().map(|w| w.values.len()).sum::<usize>()
        );
    }

    #[test]
    fn a_missing_model_file_is_named() {
        let Err(err) = load_model(Some(Path::new("/nonexistent/decima.model"))) else {
            panic!("no such file, yet a model loaded");
        };
        assert!(
            err.to_string().contains("/nonexistent/decima.model"),
            "{err}"
        );
    }
}
