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

export const ERROR_CODES = ['NOT_FOUND', 'CONFLICT', 'INVALID_INPUT'] as const;
