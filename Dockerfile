# One image for every service; the command picks the service:
#   docker run core-webhooks dist/api/main.js          # gateway
#   docker run -e NODE_OPTIONS=--max-semi-space-size=32 core-webhooks dist/router/main.js       # router
#   docker run -e NODE_OPTIONS=--max-semi-space-size=16 core-webhooks dist/dispatcher/main.js   # dispatcher
#     (the young generation the chart and `npm start` give them: README "What to expect")
#   docker run core-webhooks dist/infra/admin.js migrate   # operator CLI (migrate | topics apply | schemas register)
# Configuration comes from the environment only (README "Operating it", DESIGN.md §4 and §9).
# Where no image registry is reachable, `npm run image` (infra/image.ts) makes the Node base image from Debian's
# packages and builds this file with it as NODE_IMAGE.

ARG NODE_IMAGE=node:24-slim

# Compiles TypeScript to dist/ with every dependency the build needs, then drops the development ones. The dependencies
# come first (their layer is reused while package-lock.json is unchanged); the sources are one COPY (.dockerignore lists
# what the context holds: package files, tsconfig files and the folders the services are built from).
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
# npm run build (infra/build.ts) compiles to dist/ and copies beside the code what it reads at run time: the CQL
# migrations (dist/core/migrations), the Avro schemas (dist/schemas) and the operator console's files (dist/console).
RUN npm run build && npm prune --omit=dev --no-audit --no-fund

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
# package.json carries "type": "module", which the compiled ES modules need.
COPY --from=build --chown=root:root /app/package.json package.json
COPY --from=build --chown=root:root /app/node_modules node_modules
COPY --from=build --chown=root:root /app/dist dist
# The image's unprivileged "node" user, by number so Kubernetes can check runAsNonRoot; the files stay root's.
USER 1000:1000
EXPOSE 8080 9100
ENTRYPOINT ["node"]
CMD ["dist/api/main.js"]
