//! Decima's learned scheduling policy (issue 18; Mao et al., SIGCOMM '19, §5): a graph neural
//! network over the session's job DAGs ([`model`]), fed Decima's features ([`features`]),
//! deciding which stage runs next and with what parallelism ([`policy`]), trained by
//! REINFORCE in Fullerene's simulator ([`reinforce`], [`train`]) and stored in versioned,
//! checksummed files ([`file`]).

pub mod committed;
pub mod features;
pub mod file;
pub mod model;
pub mod policy;
pub mod reinforce;
pub mod train;

pub use committed::{built_in_model_file, load_model, BUILT_IN_MODEL};
pub use features::{observe, Observation};
pub use file::{ModelFile, ModelFileError, Provenance};
pub use model::{DecimaModel, Step};
pub use policy::{Choice, DecimaPolicy};
pub use train::{IterationReport, TrainConfig, TrainError, Trainer, EVAL_FIRST_SEED};
