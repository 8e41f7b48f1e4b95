module example.com/sluice-go

go 1.19
