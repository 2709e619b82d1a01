"""What travels between the producers, the store and the workers: inputs, reply parts, producer bodies,
operator input, due times. Pure: it imports nothing of Parley but :mod:`worker.errors`."""
