"""The Schema Registry's semantics: schemas of three formats, subjects, versions, compatibility."""
