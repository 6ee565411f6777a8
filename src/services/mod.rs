//! Built-in business objects.
