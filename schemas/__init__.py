"""JSON Schemas for every file torch-matrix writes or reads (shipped as package data)."""
