package pml

// RetryInterceptor is the unary retry of Dial, for a test to count what it sends.
var RetryInterceptor = retryInterceptor
