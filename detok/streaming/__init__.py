"""The streamed-chunk hot path: chunk rendering, SSE framing, and the push of a chunk from the
receiving loop to its connection."""
