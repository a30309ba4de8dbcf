/** Domain errors with stable codes; one HTTP error handler maps them to problem+json. */
export abstract class DomainError extends Error {
  abstract readonly code: string;
}

export class NotFoundError extends DomainError {
  readonly code = 'NOT_FOUND';
  constructor(what: string, id: string) {
    super(`${what} ${id} was not found`);
  }
}

/** The request conflicts with the resource's current state (answered with 409); subclasses name the conflict. */
export class ConflictError extends DomainError {
  readonly code: string = 'CONFLICT';
}

/** Input that is well-formed JSON but breaks a rule; each entry names the field. */
export class InvalidInputError extends DomainError {
  readonly code = 'INVALID_INPUT';
  constructor(readonly errors: { path: string; message: string }[]) {
    super(errors.map((error) => `${error.path}: ${error.message}`).join('; '));
  }
}

/** Cassandra or Kafka cannot be reached now: the API answers 503 with Retry-After, and the request can be retried. */
export class DependencyUnavailableError extends Error {
  readonly code = 'DEPENDENCY_UNAVAILABLE';
  constructor(
    readonly dependency: string,
    options?: { cause?: unknown },
  ) {
    super(`${dependency} cannot be reached right now; retry shortly`, options);
  }
}

export const ERROR_CODES = ['NOT_FOUND', 'CONFLICT', 'INVALID_INPUT'] as const;
