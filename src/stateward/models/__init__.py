"""Signal sources backed by models: they turn a request into raw text, never into control."""
