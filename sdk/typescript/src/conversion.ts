/**
 * Conversion between the versions of the parent kind: throw
 * {@link ConversionError} from `convert` to refuse a request.
 *
 * A reconciler that defines `convert`, and whose `operon.toml` says `world =
 * "reconciler-with-conversion"` (or `"reconciler-with-admission-and-conversion"`),
 * also serves its CRD's conversion webhook (with `spec.grants.conversion`).
 * @module
 */

/**
 * Throw from `convert` to refuse the whole request: the API server shows the
 * message. Any other exception is a bug (the component traps).
 */
export class ConversionError extends Error {
  override readonly name = "ConversionError";
}
