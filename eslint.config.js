import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', '.local/', 'node_modules/', 'coverage/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    // The operator console: plain ES modules run by the browser.
    files: ['console/**/*.js'],
    languageOptions: {
      sourceType: 'module',
      globals: Object.fromEntries(
        [
          'window',
          'document',
          'navigator',
          'fetch',
          'atob',
          'URL',
          'URLSearchParams',
          'AbortController',
          'DOMException',
          'HTMLElement',
          'Node',
          'Intl',
        ].map((name) => [name, 'readonly']),
      ),
    },
  },
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-restricted-syntax': [
        'error',
        {
          selector:
            'CallExpression[callee.property.name=/^(skip|only|todo)$/][callee.object.name=/^(it|test|describe)$/]',
          message: 'No skipped or focused tests.',
        },
      ],
    },
  },
);
