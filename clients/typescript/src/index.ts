/** @working-memory/client: the typed TypeScript client of the Working Memory Service. */
export * from "./client.js";
export * from "./config.js";
export * from "./engine.js";
export * from "./errors.js";
export * from "./names.js";
export * from "./stream.js";
export * from "./tools.js";
export * from "./validation.js";
export { BLANK, isBlank } from "./rules.js";
export * from "./gen/wm/v1/errors_pb.js";
export * from "./gen/wm/v1/resources_pb.js";
export * from "./gen/wm/v1/working_memory_service_pb.js";
export * as errorDetails from "./gen/google/rpc/error_details_pb.js";
