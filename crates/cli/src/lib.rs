//! The openshell command-line interface.
