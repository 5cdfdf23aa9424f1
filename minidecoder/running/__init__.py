"""Running a model: embedding lists of texts, resumable jobs, data parallelism, NaN diagnosis,
greedy generation."""
