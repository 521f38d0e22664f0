module github.com/plumb-dev/plumb

go 1.26.8

require (
	github.com/klauspost/compress v1.20.4
	github.com/ulikunitz/xz v0.5.17
)
