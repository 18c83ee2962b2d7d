"""Data layer of the training runtime: tokenizers, token shards, resumable samplers."""
