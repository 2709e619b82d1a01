module example.com/parley-producer

go 1.19
