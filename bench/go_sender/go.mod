module example.com/parley-bench-sender

go 1.19
