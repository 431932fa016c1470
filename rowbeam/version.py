"""rowbeam's version and the version of its contracts (the conventions, timing models and schemas a bundle
declares). Written into every manifest's provenance."""

ROWBEAM_VERSION = "0.1.0"
CONTRACTS_VERSION = "1.0.0"
