#pragma once
// Errors as values: Result<T>, Status, Error and ErrorKind are the worker contract's
// (worker/contract/result.h), one type for the worker runtime and the launcher.

#include "worker/contract/result.h"
